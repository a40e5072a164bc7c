use super::model::{model_choice, ModelChoice};
use super::rules::{few_rows_max_workers, ladder_tokens, scalar_pack_too_wide};
use super::*;
use crate::layout::VALID_PACKS;
use crate::mapper::{MapperPolicy, Residency};
use crate::shape::Shape;
use crate::testing::{automatic, problem, req, typed};
use crate::{model_pick, occupancy_step_to_try};
use lanefold_ir::{DType, Operator, OperatorOptions};

/// The long-row W search on the H200 (8 groups of 256 threads: 1133 µs
/// on softmax f32 4096x131072 against 1410 in 4 groups of 512): the
/// model mapping sizes cluster groups itself unless the user did.
#[test]
fn the_model_mapping_chooses_256_thread_cluster_groups_for_long_rows() {
    let p = problem(Operator::Softmax, "4096x131072");
    let t = Target::h200();
    let auto = automatic();
    let chosen = plan(&p, &t, &auto).unwrap();
    assert_eq!(
        (chosen.threads_per_group, chosen.groups_per_row),
        (256, 8),
        "{}",
        chosen.describe()
    );
    let asked = LayoutRequest {
        cluster_group_threads: 512,
        ..auto
    };
    let kept = plan(&p, &t, &asked).unwrap();
    assert_eq!(kept.threads_per_group, 512, "{}", kept.describe());
    // Rows inside one group never change with the cluster group size.
    let short = plan(&problem(Operator::Softmax, "4096x4096"), &t, &auto).unwrap();
    assert_eq!(short.groups_per_row, 1);
    assert!(short.threads_per_group <= 1024);
}

/// Streamed loops that re-read tiles keep 128 bytes in flight per worker
/// (the measured best rmsnorm f32 4096x32768 plan), read-once loops 64.
#[test]
fn automatic_unroll_keeps_more_in_flight_when_a_streamed_plan_rereads() {
    let t = Target::h200();
    let stream = LayoutRequest {
        workers: 1024,
        pack: 4,
        residency: ResidencyRequest::Stream,
        mapper: MapperPolicy::Model,
        ..Default::default()
    };
    let rereads = plan(&problem(Operator::Rmsnorm, "4096x32768"), &t, &stream).unwrap();
    assert!(rereads.rereads_tiles());
    assert_eq!(rereads.layout.unroll, 8);
    let once = plan(&problem(Operator::Sum, "4096x32768"), &t, &stream).unwrap();
    assert!(!once.rereads_tiles());
    assert_eq!(once.layout.unroll, 4);
    // Never more than the worker's full chunks: 2 on 1024x8192 at W=1024.
    let short = plan(&problem(Operator::Rmsnorm, "64x8192"), &t, &stream).unwrap();
    assert_eq!(short.layout.unroll, 2);
}

#[test]
fn seed_mapping_packs_short_rows_and_spans_clusters_for_long_ones() {
    let t = Target::h200();
    let seed = LayoutRequest {
        mapper: MapperPolicy::Seed,
        ..Default::default()
    };
    let short = plan(&problem(Operator::Rmsnorm, "32768x127"), &t, &seed).unwrap();
    assert!(short.layout.rows_per_group > 1, "{}", short.describe());
    assert_eq!(short.layout.pack, 1);
    let few = plan(&problem(Operator::Rmsnorm, "17x257"), &t, &seed).unwrap();
    assert_eq!(few.layout.rows_per_group, 1);
    let long = plan(&problem(Operator::Softmax, "64x262144"), &t, &seed).unwrap();
    assert!(long.groups_per_row > 1, "{}", long.describe());
    assert_eq!(long.residency, Residency::Registers);
    assert_eq!(
        long.tree.lanes * long.tree.warps * long.tree.groups,
        long.layout.workers
    );
}

#[test]
fn requests_recorded_before_the_model_mapping_mean_the_seed_mapping() {
    assert_eq!(LayoutRequest::default().mapper, MapperPolicy::Model);
    let mut old = serde_json::to_value(LayoutRequest::default()).unwrap();
    old.as_object_mut().unwrap().remove("mapper");
    let read: LayoutRequest = serde_json::from_value(old).unwrap();
    assert_eq!(read.mapper, MapperPolicy::Seed);
}

/// Regression: the model mapping picked W=8 V=8 G=32 with streamed
/// re-reads for bf16 cross_entropy (350-646 µs on the H200 where a
/// register plan ran 118 µs) and W=32 V=8 G=8 streamed for bf16
/// residual_layernorm 4096x32768 (1793 µs vs torch's 424 µs).
#[test]
fn model_mapping_keeps_resident_tiles_in_registers_when_it_can() {
    for (op, shape) in [
        (Operator::CrossEntropy, "32768x4096"),
        (Operator::CrossEntropy, "16384x8192"),
        (Operator::CrossEntropy, "4096x32768"),
        (Operator::ResidualLayernorm, "4096x32768"),
    ] {
        let mut pr = problem(op, shape);
        pr.dtype = DType::Bf16;
        let p = plan(&pr, &Target::h200(), &LayoutRequest::default()).unwrap();
        // residual_layernorm bf16 4096x32768 now takes the search's
        // streamed winner, one 1024-thread group per row (312 µs), not
        // the narrow W=32 stream this test pins out.
        let searched_stream = op == Operator::ResidualLayernorm && p.layout.workers == 1024;
        assert!(
            p.residency == Residency::Registers || searched_stream,
            "{op} {shape}: {}",
            p.describe()
        );
    }
}

/// Regression: roofline-v2 predicted every sum layout alike and the
/// model mapping took the first, W=8 U=1 (128-byte row spans, 16 bytes
/// in flight per worker): 0.71-0.86x of the searched winner on the
/// H200 (`2026-11-29-sum-unroll-search-h200`). The seed keeps U=1.
#[test]
fn sum_model_mapping_reads_wide_spans_with_loads_in_flight() {
    for (dtype, shape) in [
        (DType::F32, "32768x4096"),
        (DType::F32, "16384x8192"),
        (DType::Bf16, "4096x32768"),
    ] {
        let mut pr = problem(Operator::Sum, shape);
        pr.dtype = dtype;
        let p = plan(&pr, &Target::h200(), &LayoutRequest::default()).unwrap();
        let l = p.layout;
        let span = l.workers * l.pack * dtype.size_bytes() as u32;
        let in_flight = l.unroll * l.pack * dtype.size_bytes() as u32;
        assert!(span >= 256, "{shape}: {}", p.describe());
        assert!(in_flight >= 32, "{shape}: {}", p.describe());
        let seed = LayoutRequest {
            mapper: MapperPolicy::Seed,
            ..Default::default()
        };
        assert_eq!(plan(&pr, &Target::h200(), &seed).unwrap().layout.unroll, 1);
    }
}

#[test]
fn model_mapping_picks_the_lowest_prediction_of_its_family() {
    use crate::cost::{CostPolicy, Features, RooflinePolicy};
    let t = Target::h200();
    for shape in ["1x127", "17x257", "64x4096", "1024x4096", "8x131072"] {
        let p = problem(Operator::Rmsnorm, shape);
        // The model's own pick: rules beside it replace some (tested
        // with each rule).
        let chosen = match model_choice(&p, &t, &automatic()).unwrap() {
            ModelChoice::Pick(pick) => plan(&p, &t, &pick).unwrap(),
            ModelChoice::Seed(_) => panic!("{shape}: the model chose nothing"),
        };
        let predict = |pl: &Plan| RooflinePolicy.predict_us(&Features::of(pl, &t), pl, &t);
        let best = predict(&chosen);
        let mut w = 8;
        while w <= t.max_workers() {
            for v in VALID_PACKS {
                if let Ok(other) = plan(&p, &t, &req(w, v)) {
                    // Streamed plans compete only where no register
                    // plan is legal (see `model_pick`).
                    if other.rereads_tiles() && !chosen.rereads_tiles() {
                        continue;
                    }
                    assert!(
                        predict(&other) * 1.02 >= best,
                        "{shape}: W={w} V={v} predicts more than 2% lower than {}",
                        chosen.describe()
                    );
                }
            }
            w *= 2;
        }
    }
}

#[test]
fn model_mapping_with_batch_invariance_ignores_the_row_count() {
    let t = Target::h200();
    let r = LayoutRequest {
        mapper: MapperPolicy::Model,
        batch_invariant: true,
        ..Default::default()
    };
    let keys: Vec<_> = ["1x4096", "7x4096", "4096x4096", "100000x4096"]
        .iter()
        .map(|s| {
            plan(&problem(Operator::Softmax, s), &t, &r)
                .unwrap()
                .arithmetic_key()
        })
        .collect();
    assert!(keys.windows(2).all(|k| k[0] == k[1]), "{keys:?}");
}

/// Found by the CUDA selftest: on the H200,
/// layernorm and residual_layernorm took one-pass moments for fewer
/// rows than multiprocessors (and layernorm for tiles larger than the
/// L2) but not otherwise, so a batch-invariant row's bits depended on
/// how many rows ran with it.
#[test]
fn regression_batch_invariant_norms_take_one_arithmetic_at_every_row_count() {
    let t = Target::h200();
    let r = LayoutRequest {
        batch_invariant: true,
        ..Default::default()
    };
    for op in Operator::SIX {
        for dtype in [DType::F32, DType::Bf16] {
            for n in [127, 257, 4096, 8192, 32768] {
                let keys: Vec<_> = [1, 7, 4096, 16384]
                    .iter()
                    .map(|rows| {
                        let p = plan(&typed(op, dtype, &format!("{rows}x{n}")), &t, &r).unwrap();
                        p.arithmetic_key()
                    })
                    .collect();
                assert!(
                    keys.windows(2).all(|k| k[0] == k[1]),
                    "{op} {dtype} N={n}: {keys:?}"
                );
            }
        }
    }
}

#[test]
fn norm_rows_of_128_kib_stream_one_row_per_multiprocessor() {
    let t = Target::h200();
    let auto = LayoutRequest::default();
    for (op, dtype) in [
        (Operator::Rmsnorm, DType::F32),
        (Operator::Layernorm, DType::F32),
    ] {
        let p = plan(&typed(op, dtype, "4096x32768"), &t, &auto).unwrap();
        let what = format!("{op} {dtype}: {}", p.describe());
        assert_eq!(p.residency, Residency::Stream, "{what}");
        assert_eq!(p.layout.workers, 1024, "{what}");
        assert_eq!(p.occupancy_cap.map(|c| c.groups), Some(1), "{what}");
        assert_eq!(p.min_groups_per_multiprocessor, Some(1), "{what}");
        assert!(p.batched_loads, "{what}");
    }
    // Rows of 64 KiB, softmax, rows a cluster spans, and
    // residual_layernorm bf16, whose h fits in registers since session
    // 17, stay as they were.
    for (op, dtype, shape) in [
        (Operator::ResidualLayernorm, DType::Bf16, "4096x32768"),
        (Operator::Rmsnorm, DType::Bf16, "4096x32768"),
        (Operator::Layernorm, DType::Bf16, "4096x32768"),
        (Operator::Softmax, DType::F32, "4096x32768"),
        (Operator::ResidualLayernorm, DType::F32, "4096x32768"),
        (Operator::Rmsnorm, DType::F32, "16384x8192"),
    ] {
        let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
        let what = format!("{op} {dtype} {shape}: {}", p.describe());
        assert_eq!(p.occupancy_cap, None, "{what}");
        assert!(!p.batched_loads, "{what}");
    }
    let cpu = plan(
        &typed(Operator::Rmsnorm, DType::F32, "4096x32768"),
        &Target::cpu(),
        &auto,
    )
    .unwrap();
    assert_eq!(cpu.occupancy_cap, None);
}

#[test]
fn tied_plans_of_one_group_size_go_to_the_fewest_registers() {
    let score = |predicted_us, registers, threads_per_group| ModelScore {
        rereads_tiles: false,
        predicted_us,
        groups_per_row: 1,
        registers,
        threads_per_group,
    };
    // Same group size, 0.2% apart: the lighter plan wins.
    assert_eq!(
        model_pick(&[score(5.40, 110, 256), score(5.41, 64, 256)]),
        Some(1)
    );
    // Another group size is no candidate for the register tie-break.
    assert_eq!(
        model_pick(&[score(5.40, 110, 256), score(5.41, 64, 512)]),
        Some(0)
    );
    // Outside the 2% tie the prediction decides.
    assert_eq!(
        model_pick(&[score(5.00, 110, 256), score(5.41, 64, 256)]),
        Some(0)
    );
}

#[test]
fn regression_rmsnorm_bf16_1024x4096_takes_the_lighter_of_two_tied_layouts() {
    // W=64 V=8 G=4 (110 registers) ran 4.68 us, W=128 V=8 G=2 (64
    // registers) 4.10 (2026-11-30-rmsnorm-1024-search-h200).
    let p = typed(Operator::Rmsnorm, DType::Bf16, "1024x4096");
    let r = automatic();
    let chosen = plan(&p, &Target::h200(), &r).unwrap();
    assert_eq!(
        (
            chosen.layout.workers,
            chosen.layout.pack,
            chosen.layout.rows_per_group
        ),
        (128, 8, 2),
        "{}",
        chosen.describe()
    );
}

#[test]
fn regression_bf16_1024x4096_softmax_and_norms_take_8_byte_packs() {
    // The grid on today's kernels (2026-12-01-t4-grid-1024x4096-s20-h200):
    // the 16-byte-pack layouts adopted earlier had fallen to 91-97% of
    // 8-byte-pack winners.
    for (op, want) in [
        (Operator::Softmax, (256, 4, 2, 1)),
        (Operator::Layernorm, (128, 4, 2, 2)),
        (Operator::ResidualLayernorm, (256, 4, 4, 1)),
    ] {
        let p = typed(op, DType::Bf16, "1024x4096");
        let chosen = plan(&p, &Target::h200(), &automatic()).unwrap();
        let l = chosen.layout;
        assert_eq!(
            (l.workers, l.pack, l.unroll, l.rows_per_group),
            want,
            "{op:?}: {}",
            chosen.describe()
        );
    }
}

#[test]
fn regression_few_rows_take_at_most_512_workers_256_for_softmax_and_cross_entropy() {
    // A decode-shape search: the model spread 1-64 rows of 4096 f32
    // over 1024 workers, 1.05-1.22x slower than 512 (256 for softmax and
    // cross_entropy).
    let h200 = Target::h200();
    for op in Operator::SIX {
        let cap = few_rows_max_workers(op);
        for rows in [1, 8, 32, 64, 131] {
            let p = typed(op, DType::F32, &format!("{rows}x4096"));
            let got = plan(&p, &h200, &automatic()).unwrap();
            assert!(
                got.layout.workers <= cap,
                "{op:?} {rows}: {}",
                got.describe()
            );
            assert_eq!(got.groups_per_row, 1, "{}", got.describe());
            if rows > 64 {
                continue; // the model's own W may be narrower there
            }
            assert_eq!(got.layout.workers, cap, "{op:?} {rows}: {}", got.describe());
            // Every pack in flight: resident tiles load them all at
            // U=1; a sum unrolls over all of them.
            let chunks = 4096 / (cap * got.layout.pack);
            let unroll = if op == Operator::Sum { chunks } else { 1 };
            assert_eq!(got.layout.unroll, unroll, "{}", got.describe());
            let note = automatic_note(&p, &h200, &automatic()).unwrap();
            assert!(note.contains("fewer rows than multiprocessors"), "{note}");
        }
        // As many rows as multiprocessors, a row that spans a cluster,
        // and the CPU keep the model's pick.
        for shape in ["132x4096", "1024x4096", "1x262144"] {
            let p = typed(op, DType::F32, shape);
            let note = automatic_note(&p, &h200, &automatic());
            assert!(
                !note.is_some_and(|n| n.contains("fewer rows")),
                "{op:?} {shape}"
            );
        }
        let p = typed(op, DType::F32, "8x4096");
        assert!(!automatic_note(&p, &Target::cpu(), &automatic())
            .is_some_and(|n| n.contains("fewer rows")));
    }
}

/// Paired in 3 rounds: layernorm f32 long rows
/// gain 1.009-1.021x with one chunk of early columns; bf16 and rmsnorm
/// f32 did not, and shorter rows were not measured.
#[test]
fn regression_layernorm_long_rows_load_chunks_of_columns_early() {
    let target = Target::h200();
    for (op, dtype, shape, early) in [
        (Operator::Layernorm, DType::F32, "4096x131072", 2),
        // Two beside 10 shared chunks.
        (Operator::Layernorm, DType::F32, "1024x262144", 2),
        // Two: 1.007-1.009x paired.
        (Operator::Layernorm, DType::Bf16, "1024x262144", 2),
        (Operator::Layernorm, DType::F32, "4096x32768", 0),
        (Operator::Rmsnorm, DType::F32, "1024x262144", 0),
        (Operator::ResidualLayernorm, DType::F32, "1024x262144", 0),
    ] {
        let problem = Problem::operator(
            op,
            OperatorOptions::default(),
            dtype,
            shape.parse().unwrap(),
        );
        let p = plan(&problem, &target, &LayoutRequest::default()).unwrap();
        assert_eq!(
            p.early_columns,
            early,
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
    }
}

/// Layernorm f32 1024x262144 holding 12 of its 16 chunks in shared
/// memory under an occupancy cap of two groups ran 1.049x paired; 10
/// chunks and two chunks of early columns 558.3 against 570.5 µs
/// paired; 4096x131072 the same chunks in four 256-thread groups per
/// SM 1.055x paired. No other long row takes shared chunks; bf16
/// 1024x262144 takes the cap.
#[test]
fn regression_layernorm_f32_64_slot_rows_hold_ten_chunks_in_shared_memory_from_512_rows() {
    let target = Target::h200();
    // The form ran 1.06-1.12x ahead at every row
    // count measured (512-8192), so it covers row counts, not shapes.
    for (op, dtype, shape, shared, cap) in [
        (
            Operator::Layernorm,
            DType::F32,
            "512x262144",
            Some(10),
            Some(2),
        ),
        (
            Operator::Layernorm,
            DType::F32,
            "2048x262144",
            Some(10),
            Some(2),
        ),
        (
            Operator::Layernorm,
            DType::F32,
            "8192x131072",
            Some(10),
            Some(4),
        ),
        (Operator::Layernorm, DType::F32, "256x262144", None, None),
        (
            Operator::Layernorm,
            DType::F32,
            "1024x262144",
            Some(10),
            Some(2),
        ),
        // The cap's carve-out, without shared chunks.
        (
            Operator::Layernorm,
            DType::Bf16,
            "1024x262144",
            None,
            Some(2),
        ),
        (
            Operator::Layernorm,
            DType::F32,
            "4096x131072",
            Some(10),
            Some(4),
        ),
        (Operator::Rmsnorm, DType::F32, "1024x262144", None, None),
    ] {
        let p = plan(&typed(op, dtype, shape), &target, &LayoutRequest::default()).unwrap();
        let what = format!("{op} {dtype} {shape}: {}", p.describe());
        assert_eq!(p.shared_chunks.map(|s| s.chunks), shared, "{what}");
        assert_eq!(p.occupancy_cap.map(|cap| cap.groups), cap, "{what}");
        if shared.is_some() {
            // 10 chunks x the group's threads x 16 bytes beside the
            // reduction slots, padded by the cap to its share.
            let threads = p.layout.workers / p.groups_per_row;
            assert!(p.shared_bytes >= 10 * threads * 16, "{what}");
            assert_eq!(p.early_columns, 2, "{what}");
        }
        // Evict-last columns and the L2 prefetch: bf16 only (f32 lost
        // 8% with the one and 2-5% with the other).
        assert_eq!(p.keep_columns, dtype == DType::Bf16, "{what}");
        let ahead = if dtype == DType::Bf16 { 8 } else { 0 };
        assert_eq!(p.l2_prefetch_rows, ahead, "{what}");
    }
}

#[test]
fn regression_few_row_norms_take_one_pass_moments() {
    // Paired against two passes, one-pass moments
    // ran 1.02-1.13x faster on every few-row layernorm and
    // residual_layernorm case.
    let h200 = Target::h200();
    for op in [Operator::Layernorm, Operator::ResidualLayernorm] {
        for dtype in [DType::F32, DType::Bf16] {
            for (shape, one_pass) in [
                ("1x127", true),
                ("17x257", true),
                ("64x4096", true),
                ("131x4096", true),
                ("132x4096", false),
                ("1024x4096", false),
            ] {
                let p = typed(op, dtype, shape);
                let measured = automatic().with_measured_variants(&p, &h200);
                assert_eq!(
                    measured.one_pass_moments, one_pass,
                    "{op:?} {dtype:?} {shape}"
                );
                let cpu = automatic().with_measured_variants(&p, &Target::cpu());
                assert!(!cpu.one_pass_moments);
            }
        }
    }
    // An rmsnorm has one moment only.
    let p = typed(Operator::Rmsnorm, DType::F32, "8x4096");
    assert!(
        !automatic()
            .with_measured_variants(&p, &h200)
            .one_pass_moments
    );
}

#[test]
fn regression_unaligned_16_bit_rows_take_packs_of_at_most_four_except_sum() {
    // A tiny-row search: on bf16 rows of 127 and 257 every
    // access is scalar, and V=8 ran 1.10-1.19x slower than V=4.
    let h200 = Target::h200();
    for shape in ["1x127", "17x257", "3x1001"] {
        for op in [Operator::Rmsnorm, Operator::Layernorm, Operator::Softmax] {
            let p = typed(op, DType::Bf16, shape);
            let got = plan(&p, &h200, &automatic()).unwrap();
            assert!(got.layout.pack <= 4, "{op:?} {shape}: {}", got.describe());
        }
    }
    // Vector rows keep V=8, and so does a sum on scalar rows.
    let aligned = plan(
        &typed(Operator::Rmsnorm, DType::Bf16, "64x4096"),
        &h200,
        &automatic(),
    );
    assert_eq!(aligned.unwrap().layout.pack, 8);
    assert!(!scalar_pack_too_wide(
        &typed(Operator::Sum, DType::Bf16, "17x257"),
        &h200,
        8,
        false
    ));
    assert!(scalar_pack_too_wide(
        &typed(Operator::Rmsnorm, DType::Bf16, "17x257"),
        &h200,
        8,
        false
    ));
    assert!(!scalar_pack_too_wide(
        &typed(Operator::Rmsnorm, DType::Bf16, "17x257"),
        &Target::cpu(),
        8,
        false
    ));
    // Aligned packs are vectors: only short rows keep the cap.
    assert!(scalar_pack_too_wide(
        &typed(Operator::Softmax, DType::Bf16, "1x127"),
        &h200,
        8,
        true
    ));
    assert!(!scalar_pack_too_wide(
        &typed(Operator::CrossEntropy, DType::Bf16, "4096x50257"),
        &h200,
        8,
        true
    ));
    assert!(scalar_pack_too_wide(
        &typed(Operator::Softmax, DType::Bf16, "24576x577"),
        &h200,
        8,
        true
    ));
}

#[test]
fn residual_layernorm_bf16_4096x32768_keeps_h_resident_by_default_at_that_shape_only() {
    // `2026-12-01-rt-aa-h200`: 265.0 µs against the streamed plan's
    // 269.3, which had replaced the model's cluster: whole rows per pass with re-read hints, 284.8
    // µs against U=2 without hints, 310.2.
    let auto = automatic();
    let problem = typed(Operator::ResidualLayernorm, DType::Bf16, "4096x32768");
    let got = plan(&problem, &Target::h200(), &auto).unwrap();
    assert_eq!(
        got.describe(),
        "W=512 V=8 U=4 G=1 registers ordered-columns packed-resident rounded-resident \
         one-pass-moments occupancy=2"
    );
    assert_eq!(got.analysis.resident.len(), 1, "h alone");
    let note = automatic_note(&problem, &Target::h200(), &auto).unwrap();
    assert!(note.contains("h kept resident"), "{note}");
    // The variants belong to the measured shape: twice the rows, f16
    // and a batch-invariant request keep x and the residual.
    let invariant = LayoutRequest {
        batch_invariant: true,
        ..auto
    };
    for (p, request) in [
        (
            typed(Operator::ResidualLayernorm, DType::Bf16, "8192x32768"),
            auto,
        ),
        (
            typed(Operator::ResidualLayernorm, DType::F16, "4096x32768"),
            auto,
        ),
        (problem.clone(), invariant),
    ] {
        let other = plan(&p, &Target::h200(), &request).unwrap();
        assert!(
            !other.rounded_resident && !other.one_pass_moments(),
            "{}",
            other.describe()
        );
    }
    assert!(
        !plan(&problem, &Target::cpu(), &auto)
            .unwrap()
            .rounded_resident
    );
}

#[test]
fn regression_a_searched_winner_keeps_the_occupancy_promise_asked_for() {
    // Regression: the winner's own promise (residual_layernorm bf16
    // 4096x32768, two groups) once replaced the request's, so a search
    // run with `occupancy=2` no longer found today's pick of
    // layernorm bf16 1024x262144 among its candidates.
    let asked = LayoutRequest {
        occupancy: 2,
        ..automatic()
    };
    let p = typed(Operator::Layernorm, DType::Bf16, "1024x262144");
    let got = plan(&p, &Target::h200(), &asked).unwrap();
    assert_eq!(
        got.min_groups_per_multiprocessor,
        Some(2),
        "{}",
        got.describe()
    );
    assert_eq!(got.layout.workers, 4096, "{}", got.describe());
}

#[test]
fn regression_automatic_note_lists_no_empty_set_of_variants() {
    // residual_layernorm's measured variants include pushing, which
    // changes nothing on a row one group holds: with every other
    // variant already asked for, the note once read "automatic on the
    // H200 for this operator and row length: ;" (as it did for the
    // streamed default of residual_layernorm bf16 4096x32768).
    let asked = LayoutRequest {
        pack_resident: true,
        rounded_resident: true,
        ordered_columns: true,
        one_pass_moments: true,
        ..automatic()
    };
    let p = typed(Operator::ResidualLayernorm, DType::Bf16, "4096x32768");
    assert_eq!(plan(&p, &Target::h200(), &asked).unwrap().groups_per_row, 1);
    let note = automatic_note(&p, &Target::h200(), &asked).unwrap_or_default();
    assert!(!note.contains("row length: ;"), "{note}");
    assert!(note.contains("tuning database's schedule"), "{note}");
}

#[test]
fn regression_target4_misses_take_the_searched_winner_on_the_h200_only() {
    // The automatic mapping once reached 86-89%
    // of the searched winner on these three shapes.
    let auto = automatic();
    for w in crate::tuned::shipped() {
        let (rows, rows_outside) = match w.rows.max {
            Some(r) => (r, r * 2),
            None => (w.rows.min * 4, w.rows.min / 2),
        };
        let shape = Shape { rows, n: w.n.min };
        let p = Problem::operator(w.op, OperatorOptions::default(), w.dtype, shape);
        let got = plan(&p, &Target::h200(), &auto).unwrap();
        assert_eq!(
            (
                got.layout.workers,
                got.layout.pack,
                got.layout.unroll,
                got.layout.rows_per_group
            ),
            (
                w.schedule.workers,
                w.schedule.pack,
                w.schedule.unroll,
                w.schedule.rows_per_group
            ),
            "{}",
            got.describe()
        );
        if w.schedule.residency == ResidencyRequest::Stream {
            assert_eq!(got.residency, Residency::Stream, "{}", got.describe());
        }
        if w.schedule.occupancy > 0 {
            assert_eq!(
                got.min_groups_per_multiprocessor,
                Some(w.schedule.occupancy)
            );
        }
        let note = automatic_note(&p, &Target::h200(), &auto).unwrap();
        assert!(note.contains(&w.evidence), "{note}");
        // Another shape of the same operator and dtype keeps the model.
        let other = Problem::operator(
            w.op,
            OperatorOptions::default(),
            w.dtype,
            Shape {
                rows: rows_outside,
                n: w.n.min,
            },
        );
        let note = automatic_note(&other, &Target::h200(), &auto);
        assert!(!note.is_some_and(|n| n.contains("tuning database's schedule")));
        // The CPU target keeps the model's pick.
        let cpu = plan(&p, &Target::cpu(), &auto).unwrap();
        assert!(
            automatic_note(&p, &Target::cpu(), &auto).is_none(),
            "{}",
            cpu.describe()
        );
    }
}

#[test]
fn regression_cross_entropy_long_rows_take_the_online_normalizer_and_layernorm_one_pass_moments() {
    // Paired H200 benches: cross_entropy on rows over 32768 read once
    // with the online normalizer ran 1.18-1.94x faster; layernorm bf16
    // 4096x131072 with one-pass moments 1.26x; f32 1.00-1.02x on the
    // pushed cluster; rows of 32768 too.
    let t = Target::h200();
    let auto = automatic();
    let (ce, ln, sm) = (
        Operator::CrossEntropy,
        Operator::Layernorm,
        Operator::Softmax,
    );
    for (op, dtype, shape, online, moments) in [
        (ce, DType::F32, "4096x131072", true, false),
        (ce, DType::Bf16, "4096x131072", true, false),
        (ce, DType::Bf16, "1024x262144", true, false),
        (ce, DType::Bf16, "4096x65536", true, false),
        (ln, DType::Bf16, "4096x131072", false, true),
        (ln, DType::Bf16, "1024x262144", false, true),
        (ln, DType::F32, "4096x131072", false, true),
        (ln, DType::F32, "1024x262144", false, true),
        // Paired with all three peers: 1.020x f32, 1.045x bf16.
        (ln, DType::F32, "4096x32768", false, true),
        (ln, DType::Bf16, "4096x32768", false, true),
        // Measured slower or no faster, or unmeasured: unchanged.
        (ce, DType::Bf16, "4096x32768", false, false),
        (ce, DType::Bf16, "16384x8192", false, false),
        (ln, DType::Bf16, "8192x16384", false, false),
        (sm, DType::Bf16, "4096x131072", false, false),
    ] {
        let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
        assert_eq!(
            (p.online_normalizer(), p.one_pass_moments()),
            (online, moments),
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
    }
    // The streaming plan: one group per row, nothing resident.
    let p = plan(&typed(ce, DType::Bf16, "4096x131072"), &t, &auto).unwrap();
    assert_eq!(
        (p.groups_per_row, p.resident_slots),
        (1, 0),
        "{}",
        p.describe()
    );
    // Explicit layouts (search candidates, frozen replays), other
    // targets and exact programs keep the arithmetic they ask for.
    let explicit = LayoutRequest {
        workers: 2048,
        pack: 8,
        ..auto
    };
    let long_ce = typed(ce, DType::Bf16, "4096x131072");
    assert!(!plan(&long_ce, &t, &explicit).unwrap().online_normalizer());
    assert!(!plan(&long_ce, &Target::cpu(), &auto)
        .unwrap()
        .online_normalizer());
    let exact = Problem {
        program: long_ce.program.clone().exact(),
        ..long_ce
    };
    assert!(!plan(&exact, &t, &auto).unwrap().online_normalizer());
}

#[test]
fn regression_misaligned_long_cross_entropy_rows_stream_online_at_w256() {
    // H200 searches of rows in no list: the register plans of 27001-28002
    // (scalar loads, one group per SM) ran 1.26-1.72x slower than the
    // online normalizer at W=256; at 24002 the register plans won.
    let t = Target::h200();
    let auto = automatic();
    let ce = Operator::CrossEntropy;
    for (dtype, shape, online) in [
        (DType::F32, "4096x28002", true),
        (DType::F32, "4096x27001", true),
        (DType::Bf16, "4096x28002", true),
        (DType::Bf16, "4096x30522", true),
        // Aligned rows read 16-byte vectors: 8192x32064 tied online.
        (DType::F32, "4096x30524", false),
        (DType::Bf16, "8192x32064", false),
        (DType::F32, "4096x24002", false),
    ] {
        let p = plan(&typed(ce, dtype, shape), &t, &auto).unwrap();
        assert_eq!(
            p.online_normalizer(),
            online,
            "{dtype} {shape}: {}",
            p.describe()
        );
        if online {
            assert_eq!(p.layout.workers, 256, "{dtype} {shape}: {}", p.describe());
        }
    }
}

#[test]
fn regression_tiny_rows_take_one_thread_a_row() {
    // The model's space starts at W=8; on f32 and bf16 sums and softmax
    // over rows of 4-16 elements the W=8 picks ran 1.13-4.9x slower than W=1.
    let t = Target::h200();
    let auto = automatic();
    for (op, dtype, shape, pack) in [
        (Operator::Sum, DType::F32, "131072x8", 8),
        (Operator::Softmax, DType::F32, "65536x16", 8),
        (Operator::Sum, DType::F32, "262144x4", 4),
        (Operator::Sum, DType::F32, "65536x12", 4),
        (Operator::Sum, DType::Bf16, "131072x8", 8),
        (Operator::Softmax, DType::Bf16, "262144x4", 4),
    ] {
        let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
        assert_eq!(
            (p.layout.workers, p.layout.pack),
            (1, pack),
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
    }
    // Too few rows for a 256-row group on every SM, f16 rows, other
    // operators: unmeasured, left to the model.
    for (op, dtype, shape) in [
        (Operator::Softmax, DType::F32, "8192x8"),
        (Operator::Sum, DType::F16, "131072x8"),
        (Operator::Rmsnorm, DType::F32, "131072x8"),
    ] {
        let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
        assert!(
            p.layout.workers > 1,
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
    }
}

#[test]
fn regression_short_decode_norm_rows_take_one_chunk_a_worker() {
    // On fewer rows than SMs the model picked one warp a row (three to
    // seven chunks) on bf16 rows up to 1792 and f32 up to 896; one chunk
    // a worker ran 1.06-1.86x faster in searches of rows of no list.
    let t = Target::h200();
    let auto = automatic();
    for (op, dtype, shape, workers) in [
        (Operator::Rmsnorm, DType::Bf16, "32x1792", 256),
        (Operator::Rmsnorm, DType::Bf16, "32x896", 128),
        (Operator::Rmsnorm, DType::F32, "17x257", 128),
        (Operator::Layernorm, DType::Bf16, "8x1024", 128),
        (Operator::Layernorm, DType::Bf16, "48x640", 128),
    ] {
        let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
        assert_eq!(
            (p.layout.workers, p.layout.chunks(p.shape().n)),
            (workers, 1),
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
    }
    // Already one chunk (W=16 on 128 bf16 elements), more packs than the
    // few-rows cap (f32 2304: four chunks at W=128 ran best), as many rows
    // as SMs, other operators, f32 layernorm (W=32 won two of three): the
    // rule leaves a narrow pick as it is.
    for (op, dtype, shape, workers, pack) in [
        (Operator::Rmsnorm, DType::Bf16, "64x128", 16, 8),
        (Operator::Rmsnorm, DType::F32, "48x2304", 128, 4),
        (Operator::Rmsnorm, DType::Bf16, "132x1792", 32, 8),
        (Operator::Softmax, DType::Bf16, "32x1792", 32, 8),
        (Operator::Layernorm, DType::F32, "32x640", 32, 4),
        (Operator::Layernorm, DType::Bf16, "17x257", 32, 4),
    ] {
        let problem = typed(op, dtype, shape);
        let pick = LayoutRequest {
            workers,
            pack,
            ..auto
        };
        let picked = crate::legality::plan_rows(&problem, &t, &pick).unwrap();
        assert_eq!(
            super::rules::few_rows_one_chunk_instead(&problem, &t, &picked, &pick),
            None,
            "{op} {dtype} {shape}"
        );
    }
}

#[test]
fn regression_bf16_saved_lse_backward_rows_take_a_group_of_1024() {
    // The model's W=512 picks ran 1.008-1.26x slower than one group of
    // 1024 workers on bf16 saved-lse backward rows of 16384-100000
    // (4096x32000: 161 against 127.5 µs).
    let t = Target::h200();
    let auto = automatic();
    for shape in ["4096x32000", "16384x32000", "8192x50257", "1024x100000"] {
        let p = plan(
            &typed(Operator::CrossEntropyBackward, DType::Bf16, shape),
            &t,
            &auto,
        )
        .unwrap();
        assert_eq!(
            (p.layout.workers, p.groups_per_row),
            (1024, 1),
            "{shape}: {}",
            p.describe()
        );
    }
    // Past the measured range (at 128256 W=1024 ran 1.7% slower), rows
    // shorter than it, fewer rows than SMs, f32 (mixed), the forward:
    // the model's pick stays.
    for (op, dtype, shape) in [
        (Operator::CrossEntropyBackward, DType::Bf16, "4096x128256"),
        (Operator::CrossEntropyBackward, DType::Bf16, "4096x8192"),
        (Operator::CrossEntropyBackward, DType::Bf16, "64x32000"),
        (Operator::CrossEntropyBackward, DType::F32, "4096x32000"),
        (Operator::CrossEntropy, DType::Bf16, "4096x32000"),
    ] {
        let note = automatic_note(&typed(op, dtype, shape), &t, &auto).unwrap_or_default();
        assert!(!note.contains("saved lse"), "{op} {dtype} {shape}: {note}");
    }
}

#[test]
fn regression_long_cross_entropy_rows_take_no_group_of_1024() {
    // One group of 1024 threads per SM never won a cross-entropy search
    // on rows of 12002-40002 (1.02-1.98x slower); the model picked it at
    // 28000. Fewer rows than SMs are a latency problem: left alone.
    let t = Target::h200();
    let auto = automatic();
    for (dtype, shape) in [(DType::F32, "4096x28000"), (DType::Bf16, "4096x28000")] {
        let p = plan(&typed(Operator::CrossEntropy, dtype, shape), &t, &auto).unwrap();
        assert!(
            p.threads_per_group < 1024,
            "{dtype} {shape}: {}",
            p.describe()
        );
    }
    let short = plan(
        &typed(Operator::CrossEntropy, DType::F32, "64x50432"),
        &t,
        &auto,
    )
    .unwrap();
    assert_eq!(short.threads_per_group, 1024, "{}", short.describe());
}

#[test]
fn regression_long_16_bit_rows_pack_their_resident_tiles() {
    // Paired H200 benches of one binary: softmax 1.07x and 1.12x, rmsnorm 1.01x and 1.11x,
    // layernorm 1.05x and 1.09x, residual_layernorm 1.04x and 1.25x.
    let t = Target::h200();
    let auto = automatic();
    for (op, dtype, shape, packed) in [
        (Operator::Softmax, DType::Bf16, "4096x131072", true),
        (Operator::Rmsnorm, DType::Bf16, "1024x262144", true),
        (Operator::Layernorm, DType::F16, "4096x131072", true),
        (
            Operator::ResidualLayernorm,
            DType::Bf16,
            "1024x262144",
            true,
        ),
        (Operator::Softmax, DType::F32, "4096x131072", false),
        (Operator::Softmax, DType::Bf16, "4096x32768", true),
        (Operator::Softmax, DType::Bf16, "16384x8192", false),
        (Operator::Rmsnorm, DType::Bf16, "4096x32768", false),
        (
            Operator::ResidualLayernorm,
            DType::Bf16,
            "32768x4096",
            false,
        ),
        (Operator::CrossEntropy, DType::Bf16, "4096x131072", false),
    ] {
        let problem = typed(op, dtype, shape);
        let p = plan(&problem, &t, &auto).unwrap();
        assert_eq!(
            p.packed_resident,
            packed,
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
        assert_eq!(
            automatic_note(&problem, &t, &auto).is_some_and(|n| n.contains("packed")),
            packed
        );
        // Packing never changes the layout the model picks.
        let unpacked = LayoutRequest {
            pack_resident: false,
            ..auto
        };
        let explicit = LayoutRequest {
            workers: p.layout.workers,
            pack: p.layout.pack,
            unroll: p.layout.unroll,
            rows_per_group: p.layout.rows_per_group,
            cluster_group_threads: p.threads_per_group,
            ..unpacked
        };
        let q = plan(&problem, &t, &explicit).unwrap();
        assert!(!q.packed_resident);
        assert_eq!(q.layout, p.layout);
    }
}

#[test]
fn regression_long_f32_layernorm_rows_push_without_an_occupancy_promise() {
    // A promise of three groups per multiprocessor ran 1.10x on the
    // fenced form. Paired, one binary: pushed with no promise (104
    // registers, no spill) 1.06x on 4096x131072 and 1.08x on
    // 1024x262144 against the promise with the relaxed exit; and
    // rmsnorm f32 pushed without the staged weight 1.03-1.04x. The
    // defaults are those plans.
    let t = Target::h200();
    let auto = automatic();
    // (op, shape, workers, cluster, group threads, pushed, staged
    // weight). Layernorm 1024x262144 in eight 512-thread groups: 1.03x.
    for (op, shape, workers, cluster, threads, pushed, staged) in [
        (
            Operator::Layernorm,
            "4096x131072",
            2048,
            8,
            256,
            true,
            false,
        ),
        (
            Operator::Layernorm,
            "1024x262144",
            4096,
            8,
            512,
            true,
            false,
        ),
        (Operator::Rmsnorm, "1024x262144", 4096, 16, 256, true, false),
        (Operator::Rmsnorm, "4096x131072", 2048, 8, 256, true, false),
    ] {
        let problem = typed(op, DType::F32, shape);
        let p = plan(&problem, &t, &auto).unwrap();
        let what = format!("{op} {shape}: {}", p.describe());
        assert_eq!(p.min_groups_per_multiprocessor, None, "{what}");
        assert_eq!(
            (p.layout.workers, p.layout.pack, p.threads_per_group),
            (workers, 4, threads),
            "{what}"
        );
        assert_eq!(p.groups_per_row, cluster, "{what}");
        assert_eq!(p.pushed_cluster_reduce, pushed, "{what}");
        assert_eq!(p.staged_columns(), staged, "{what}");
        // One-pass moments 1.00-1.02x on these layernorm plans.
        assert_eq!(p.one_pass_moments(), op == Operator::Layernorm, "{what}");
        // No promise; the cap on layernorm 1024x262144 is a
        // carve-out for its shared chunks, named as such.
        let note = automatic_note(&problem, &t, &auto).unwrap_or_default();
        assert!(
            !note
                .replace("occupancy cap", "")
                .replace("occupancy-cap", "")
                .contains("occupancy"),
            "{note}"
        );
    }
}

/// The H200's automatic softmax plan of `shape`.
fn automatic_softmax(dtype: DType, shape: &str) -> Plan {
    plan(
        &typed(Operator::Softmax, dtype, shape),
        &Target::h200(),
        &automatic(),
    )
    .unwrap()
}

/// Softmax rows under the push-reduce rung's 131072 that the choice puts
/// in a cluster push their partials and keep the layout they were picked
/// with; rows one group holds stay as they were (f32 4096x32768, a target
/// shape, among them).
#[test]
fn softmax_cluster_rows_under_131072_push_and_keep_their_layout() {
    let mut pushed = 0;
    for dtype in [DType::F32, DType::Bf16] {
        for n in [32768, 45056, 50000, 57344, 80000, 100000, 131071] {
            for rows in [1, 16, 64, 256, 1024, 4096] {
                if rows * n > 400_000_000 {
                    continue;
                }
                let shape = format!("{rows}x{n}");
                let p = automatic_softmax(dtype, &shape);
                let what = format!("{dtype} {rows}x{n}: {}", p.describe());
                assert_eq!(p.pushed_cluster_reduce, p.groups_per_row > 1, "{what}");
                pushed += usize::from(p.pushed_cluster_reduce);
            }
        }
    }
    assert!(pushed >= 40, "{pushed} cluster plans");
    for (dtype, shape, schedule) in [
        (DType::F32, "4096x32768", "W=512 V=4 U=4 G=1 registers"),
        (
            DType::F32,
            "1x50000",
            "W=8192 V=4 U=1 G=1 registers push-reduce",
        ),
        (
            DType::Bf16,
            "4096x110000",
            "W=2048 V=8 U=4 G=1 registers push-reduce group-threads=256",
        ),
    ] {
        let p = automatic_softmax(dtype, shape);
        assert_eq!(p.schedule().to_string(), schedule, "{dtype} {shape}");
    }
}

/// Softmax decode rows of 32768-131071 (at most 64) that the model holds in
/// one group a row are re-chosen with the push, into a pushed cluster
/// where the model then spans one; a cluster pick keeps its layout, and
/// past 64 rows the one-group pick stays.
#[test]
fn softmax_decode_rows_in_one_group_are_rechosen_pushed() {
    let mut clusters = 0;
    for dtype in [DType::F32, DType::Bf16] {
        for n in [32768, 33000, 41000, 47000, 60000, 90000, 131071] {
            for rows in [1, 4, 16, 32, 64] {
                let p = automatic_softmax(dtype, &format!("{rows}x{n}"));
                let what = format!("{dtype} {rows}x{n}: {}", p.describe());
                assert_eq!(p.pushed_cluster_reduce, p.groups_per_row > 1, "{what}");
                clusters += usize::from(p.groups_per_row > 1);
            }
        }
    }
    // Where the model holds a row in one group even with the push asked
    // for (bf16 rows of 32768-33000, f32 64x47000), it stays so.
    assert!(clusters >= 55, "{clusters} of 70 in clusters");
    for (dtype, shape, schedule) in [
        (
            DType::F32,
            "4x37000",
            "W=8192 V=4 U=1 G=1 registers push-reduce",
        ),
        (
            DType::F32,
            "64x38000",
            "W=2048 V=4 U=4 G=1 registers push-reduce",
        ),
        // A cluster pick, pushed in its own layout.
        (
            DType::Bf16,
            "8x70000",
            "W=4096 V=8 U=2 G=1 registers push-reduce",
        ),
        // Misaligned 16-bit rows the model keeps in one group of aligned
        // packs: the widest pushed cluster on at most 16 rows, as measured;
        // where the model itself spans that cluster, in its aligned packs.
        (
            DType::Bf16,
            "1x36001",
            "W=8192 V=4 U=1 G=1 registers push-reduce",
        ),
        (
            DType::Bf16,
            "16x37001",
            "W=8192 V=8 U=1 G=1 registers unfolded-addresses push-reduce aligned-packs",
        ),
        (
            DType::F16,
            "4x33333",
            "W=8192 V=4 U=1 G=1 registers push-reduce",
        ),
        (
            DType::Bf16,
            "32x35787",
            "W=512 V=8 U=4 G=1 registers aligned-packs",
        ),
        // Past the decode rows and under the rung: one group.
        (DType::F32, "96x38000", "W=512 V=4 U=4 G=1 registers"),
        (DType::F32, "64x32760", "W=512 V=4 U=4 G=1 registers"),
    ] {
        let p = automatic_softmax(dtype, shape);
        assert_eq!(p.schedule().to_string(), schedule, "{dtype} {shape}");
        let note = automatic_note(
            &typed(Operator::Softmax, dtype, shape),
            &Target::h200(),
            &automatic(),
        );
        let one_group = p.groups_per_row == 1;
        assert_eq!(
            note.as_deref().is_some_and(|n| n.contains("decode rows")),
            !one_group && shape != "8x70000",
            "{dtype} {shape}: {note:?}"
        );
    }
}

#[test]
fn regression_long_cluster_rows_push_their_partials_or_exit_relaxed_as_measured() {
    // Paired H200 benches of one binary: pushed 1.10-1.34x for softmax
    // and the bf16 norms; for the f32 norms pushed was 0.95-1.01x and
    // the relaxed exit 1.02-1.07x. Another pair: residual_layernorm
    // 1.22-1.37x, and
    // cross_entropy 1024x262144 1.02-1.04x.
    let t = Target::h200();
    let auto = automatic();
    // (op, dtype, shape, pushed, relaxed exit)
    for (op, dtype, shape, pushed, relaxed) in [
        (Operator::Softmax, DType::F32, "4096x131072", true, true),
        (Operator::Softmax, DType::Bf16, "1024x262144", true, true),
        (Operator::Rmsnorm, DType::Bf16, "4096x131072", true, true),
        (Operator::Layernorm, DType::Bf16, "1024x262144", true, true),
        (Operator::Rmsnorm, DType::F32, "4096x131072", true, true),
        (Operator::Rmsnorm, DType::F32, "1024x262144", true, true),
        (Operator::Layernorm, DType::F32, "1024x262144", true, true),
        (
            Operator::ResidualLayernorm,
            DType::Bf16,
            "4096x131072",
            true,
            true,
        ),
        (
            Operator::ResidualLayernorm,
            DType::F32,
            "4096x32768",
            true,
            true,
        ),
        (
            Operator::CrossEntropy,
            DType::Bf16,
            "1024x262144",
            true,
            true,
        ),
        // One group per row: nothing to push (the flag stays off).
        (
            Operator::CrossEntropy,
            DType::F32,
            "4096x131072",
            false,
            false,
        ),
        (Operator::Softmax, DType::F32, "4096x32768", false, false),
    ] {
        let problem = typed(op, dtype, shape);
        let p = plan(&problem, &t, &auto).unwrap();
        let what = format!("{op} {dtype} {shape}: {}", p.describe());
        assert_eq!(p.pushed_cluster_reduce, pushed, "{what}");
        assert_eq!(
            p.relaxed_cluster_exit || p.pushed_cluster_reduce,
            relaxed,
            "{what}"
        );
        let note = automatic_note(&problem, &t, &auto).unwrap_or_default();
        if pushed || relaxed {
            assert!(p.groups_per_row > 1, "{what}");
            assert!(note.contains("pushed by st.async"), "{note}");
        } else {
            assert!(!note.contains("pushed by st.async"), "{what}: {note}");
        }
        // An explicit layout keeps its recorded barriers (frozen replays).
        let explicit = LayoutRequest {
            workers: p.layout.workers,
            pack: p.layout.pack,
            ..auto
        };
        let q = plan(&problem, &t, &explicit).unwrap();
        assert!(
            !q.pushed_cluster_reduce && !q.relaxed_cluster_exit,
            "{what}"
        );
    }
}

#[test]
fn regression_long_rmsnorm_rows_stage_their_weight_where_it_measured_faster() {
    // Paired H200 benches: f32 4096x131072 1.10x, 1024x262144 1.13x,
    // bf16 1024x262144 1.07x; bf16 4096x131072 0.71x, layernorm f32
    // 0.63-0.74x (a 128 KB stage leaves one group per multiprocessor).
    // f32 pushes unstaged instead, 1.03-1.04x.
    let t = Target::h200();
    let auto = automatic();
    for (op, dtype, shape, staged) in [
        (Operator::Rmsnorm, DType::F32, "4096x131072", false),
        (Operator::Rmsnorm, DType::F32, "1024x262144", false),
        (Operator::Rmsnorm, DType::Bf16, "1024x262144", true),
        (Operator::Rmsnorm, DType::Bf16, "4096x131072", false),
        (Operator::Rmsnorm, DType::F32, "4096x32768", false),
        (Operator::Layernorm, DType::F32, "4096x131072", false),
        (Operator::Layernorm, DType::Bf16, "1024x262144", false),
    ] {
        let problem = typed(op, dtype, shape);
        let p = plan(&problem, &t, &auto).unwrap();
        assert_eq!(
            p.staged_columns(),
            staged,
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
        assert_eq!(
            automatic_note(&problem, &t, &auto).is_some_and(|n| n.contains("staged")),
            staged
        );
        // An explicit layout keeps what it asks for.
        let explicit = LayoutRequest {
            workers: p.layout.workers,
            pack: p.layout.pack,
            ..auto
        };
        assert!(!plan(&problem, &t, &explicit).unwrap().staged_columns());
    }
}

#[test]
fn regression_64_slot_register_plans_of_rmsnorm_and_bf16_softmax_stream_with_reread_hints() {
    // Paired H200 replays with all three peers: these streamed plans beat the register defaults by 2-11%. Softmax
    // bf16 4096x32768 streamed too until its register plan was packed
    // (150.4 -> 131.7 µs).
    let t = Target::h200();
    let auto = automatic();
    let pick = |op, dtype, shape: &str, r: &LayoutRequest| {
        let p = typed(op, dtype, shape);
        plan(&p, &t, r).unwrap()
    };
    let (rms, sm, ln) = (Operator::Rmsnorm, Operator::Softmax, Operator::Layernorm);
    // (softmax bf16 on rows of 4096-8192 streams whole rows since session
    // 13: regression_rows_of_4096_to_8192_stream_whole_rows_per_pass.)
    for (op, dtype, shape, w, v, u) in [
        (rms, DType::Bf16, "32768x4096", 256, 8, 2),
        (rms, DType::Bf16, "16384x8192", 512, 8, 2),
        (rms, DType::Bf16, "4096x32768", 1024, 8, 4),
        (rms, DType::F32, "4096x32768", 1024, 4, 8),
    ] {
        let p = pick(op, dtype, shape, &auto);
        assert_eq!(
            (
                p.layout.workers,
                p.layout.pack,
                p.layout.unroll,
                p.residency,
                p.reread_hints
            ),
            (w, v, u, Residency::Stream, true),
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
    }
    // Measured slower, unmeasured, or not the 64-slot plan: unchanged.
    // (layernorm f32 4096x32768 streams, as the
    // search's winner: norm_rows_of_128_kib_stream_one_row_per_multiprocessor.)
    for (op, dtype, shape) in [
        (ln, DType::Bf16, "4096x32768"),
        (sm, DType::F32, "4096x32768"),
        (sm, DType::Bf16, "1024x4096"),
        (rms, DType::Bf16, "4096x131072"),
    ] {
        let p = pick(op, dtype, shape, &auto);
        assert_eq!(
            p.residency,
            Residency::Registers,
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
    }
    // Another target (the CPU executor's) keeps the model's pick.
    let p = typed(rms, DType::Bf16, "32768x4096");
    assert_eq!(
        plan(&p, &Target::cpu(), &auto).unwrap().residency,
        Residency::Registers
    );
    // A user's residency or batch invariance is never overridden.
    for r in [
        LayoutRequest {
            residency: ResidencyRequest::Registers,
            ..auto
        },
        LayoutRequest {
            batch_invariant: true,
            ..auto
        },
    ] {
        let p = pick(rms, DType::Bf16, "32768x4096", &r);
        assert_eq!(p.residency, Residency::Registers, "{}", p.describe());
    }
}

/// bf16 layernorm rows of 4096-8192 past the L2 whose packs do not divide
/// among the streamed plan's 256 workers ran 1.08-3.11x faster in the
/// model's register plan (H100 A B B A, rows of no list); rows that
/// divide evenly, f32 and softmax keep the stream.
#[test]
fn regression_ragged_bf16_layernorm_rows_past_the_l2_keep_the_register_plan() {
    let (ln, sm) = (Operator::Layernorm, Operator::Softmax);
    for (op, dtype, shape, streamed) in [
        (ln, DType::Bf16, "60000x5000", false),
        (ln, DType::Bf16, "25000x7800", false),
        (ln, DType::Bf16, "36000x5500", false),
        (ln, DType::Bf16, "30000x6144", true),
        (ln, DType::F32, "30000x6100", true),
        (sm, DType::Bf16, "60000x6144", true),
    ] {
        let p = streamed_as_said(op, dtype, shape, streamed);
        assert_eq!(p.one_pass_moments(), op == ln, "{}", p.describe());
    }
}

/// The automatic H200 plan of `op dtype shape`, asserted streamed or not.
fn streamed_as_said(op: Operator, dtype: DType, shape: &str, streamed: bool) -> Plan {
    let p = plan(&typed(op, dtype, shape), &Target::h200(), &automatic()).unwrap();
    assert_eq!(
        p.residency == Residency::Stream,
        streamed,
        "{op} {dtype} {shape}: {}",
        p.describe()
    );
    p
}

#[test]
fn regression_bf16_rows_of_a_partial_stream_stripe_keep_the_register_pick() {
    // H100 A B B A, L2 cold-inputs: the hinted stream ran 1.03-1.67x
    // slower on bf16 rows of a partial W x V stripe, the whole-row stream
    // 1.18-1.55x slower on aligned bf16 softmax rows of 4097-5400.
    let (rms, sm) = (Operator::Rmsnorm, Operator::Softmax);
    for (op, dtype, shape, streamed) in [
        (rms, DType::Bf16, "8000x17001", false),
        (rms, DType::Bf16, "10000x20480", false),
        (rms, DType::Bf16, "3000x40000", false),
        (sm, DType::Bf16, "10000x17000", false),
        (rms, DType::Bf16, "12000x16384", true),
        (rms, DType::Bf16, "6000x24576", true),
        (rms, DType::Bf16, "4000x32768", true),
        (rms, DType::F32, "8000x17500", true),
        (sm, DType::Bf16, "2048x50257", true),
        (sm, DType::Bf16, "50000x4400", false),
        (sm, DType::Bf16, "40000x5400", false),
        (sm, DType::Bf16, "38000x5480", true),
        (sm, DType::Bf16, "46000x4700", true),
        (sm, DType::F32, "40000x5000", true),
        (rms, DType::Bf16, "3000x50000", true),
    ] {
        streamed_as_said(op, dtype, shape, streamed);
    }
}

#[test]
fn regression_rows_of_4096_to_8192_stream_whole_rows_per_pass() {
    // In 2026-11-30-t1s-*-h200 (the f32 norms also replayed A/A):
    // torch.compile and Liger were
    // 1-4% ahead of the model's picks here.
    let t = Target::h200();
    let auto = automatic();
    let (rms, ln, sm) = (Operator::Rmsnorm, Operator::Layernorm, Operator::Softmax);
    let (f32, bf16) = (DType::F32, DType::Bf16);
    for (op, dtype, shape, w, v) in [
        (rms, f32, "32768x4096", 512, 4),
        (rms, f32, "16384x8192", 1024, 4),
        (ln, f32, "32768x4096", 512, 4),
        (ln, f32, "16384x8192", 512, 4),
        (ln, bf16, "32768x4096", 256, 8),
        (ln, bf16, "16384x8192", 256, 8),
        (sm, f32, "32768x4096", 512, 4),
        (sm, f32, "16384x8192", 512, 4),
        (sm, bf16, "32768x4096", 256, 8),
        (sm, bf16, "16384x8192", 256, 8),
    ] {
        let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
        assert_eq!(
            (
                p.layout.workers,
                p.layout.pack,
                p.layout.unroll,
                p.residency,
                p.reread_hints,
                p.one_pass_moments()
            ),
            (w, v, 4, Residency::Stream, true, op == ln),
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
        // Rows of 4096 (two packs a worker): layernorm keeps its hinted
        // loads ordered; nothing promises an occupancy.
        let ordered = shape.ends_with("x4096") && op == ln;
        assert_eq!(
            (p.min_groups_per_multiprocessor, p.ordered_hinted_loads),
            (None, ordered),
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
        // The CPU keeps the model's pick, and layernorm its two passes.
        let cpu = plan(&typed(op, dtype, shape), &Target::cpu(), &auto).unwrap();
        assert!(
            !(cpu.residency == Residency::Stream && cpu.reread_hints),
            "{}",
            cpu.describe()
        );
        assert!(!cpu.one_pass_moments(), "{}", cpu.describe());
    }
    // Rows of 32768 (measured slower at W=512), bf16 rmsnorm (its own
    // rule), data inside the L2, unsearched operators, and a user's
    // residency: not this rule's plan.
    for (op, dtype, shape, r) in [
        (ln, f32, "4096x32768", auto),
        (rms, bf16, "32768x4096", auto),
        (rms, f32, "2048x4096", auto),
        (Operator::ResidualLayernorm, f32, "32768x4096", auto),
        (Operator::CrossEntropy, bf16, "32768x4096", auto),
        (
            rms,
            f32,
            "32768x4096",
            LayoutRequest {
                residency: ResidencyRequest::Registers,
                ..auto
            },
        ),
    ] {
        let p = plan(&typed(op, dtype, shape), &t, &r).unwrap();
        assert!(
            !(p.residency == Residency::Stream && p.layout.unroll == 4),
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
    }
}

#[test]
fn an_occupancy_step_is_tried_only_a_few_registers_over_its_budget() {
    let t = Target::h200();
    // Measured: 71 -> 64 fit (no spill), 80 and 117 spilled.
    assert_eq!(occupancy_step_to_try(&t, 256, 71, 0), Some(4));
    assert_eq!(occupancy_step_to_try(&t, 256, 80, 0), None);
    assert_eq!(occupancy_step_to_try(&t, 256, 117, 0), None);
    // Already at the step, or at the thread limit.
    assert_eq!(occupancy_step_to_try(&t, 256, 64, 0), None);
    assert_eq!(occupancy_step_to_try(&t, 1024, 20, 0), None);
    // 86 registers: 2 groups of 256; 3 need 80 or fewer.
    assert_eq!(occupancy_step_to_try(&t, 256, 86, 0), Some(3));
    assert_eq!(occupancy_step_to_try(&t, 512, 110, 0), None);
}

#[test]
fn the_automatic_note_names_the_model_pick_a_rule_replaced() {
    let t = Target::h200();
    let auto = automatic();
    let problem = |op, dtype| typed(op, dtype, "32768x4096");
    let note = automatic_note(&problem(Operator::Rmsnorm, DType::Bf16), &t, &auto).unwrap();
    assert!(note.contains("W=64 V=8 U=4 G=4 registers"), "{note}");
    assert_eq!(
        automatic_note(
            &problem(Operator::ResidualLayernorm, DType::Bf16),
            &t,
            &auto
        ),
        None
    );
    let explicit = LayoutRequest {
        workers: 64,
        pack: 8,
        ..auto
    };
    assert_eq!(
        automatic_note(&problem(Operator::Rmsnorm, DType::Bf16), &t, &explicit),
        None
    );
}

/// The defaults: 16-bit layernorm rows that one group holds
/// keep packed tiles and load their columns in order; rows spanning a
/// cluster never order their columns (slower there), and
/// layernorm 1024x262144 runs in clusters of eight 512-thread groups
/// in both dtypes.
#[test]
fn layernorm_defaults_pack_and_order_columns_and_pick_512_thread_groups() {
    let t = Target::h200();
    let auto = automatic();
    let default =
        |dtype, shape: &str| plan(&typed(Operator::Layernorm, dtype, shape), &t, &auto).unwrap();
    let wide = default(DType::Bf16, "4096x32768");
    assert!(
        wide.packed_resident && wide.ordered_columns,
        "{}",
        wide.describe()
    );
    assert_eq!(wide.groups_per_row, 1);
    let f32_wide = default(DType::F32, "4096x32768");
    assert!(!f32_wide.ordered_columns, "{}", f32_wide.describe());
    for shape in ["4096x65536", "4096x131072"] {
        let long = default(DType::Bf16, shape);
        assert!(
            long.groups_per_row > 1 && !long.ordered_columns,
            "{}",
            long.describe()
        );
    }
    for dtype in [DType::F32, DType::Bf16] {
        let p = default(dtype, "1024x262144");
        assert_eq!(
            (p.groups_per_row, p.row_threads_per_group()),
            (8, 512),
            "{}",
            p.describe()
        );
    }
    // Other operators keep sixteen 256-thread groups there.
    let rms = plan(
        &typed(Operator::Rmsnorm, DType::Bf16, "1024x262144"),
        &t,
        &auto,
    )
    .unwrap();
    assert_eq!(rms.row_threads_per_group(), 256, "{}", rms.describe());
}

/// Short scalar rows in their thousands take packs of one 4-byte word (a
/// warp's loads consecutive); few rows, long rows and vector rows keep
/// what the model picks.
#[test]
fn many_short_scalar_rows_take_packs_of_one_word() {
    let t = Target::h200();
    let pack = |op, dtype, shape: &str| {
        plan(&typed(op, dtype, shape), &t, &automatic())
            .unwrap()
            .layout
            .pack
    };
    assert_eq!(pack(Operator::Softmax, DType::F32, "16384x75"), 1);
    assert_eq!(pack(Operator::Softmax, DType::F32, "65536x77"), 1);
    assert_eq!(pack(Operator::Softmax, DType::Bf16, "75648x197"), 2);
    assert_eq!(pack(Operator::Rmsnorm, DType::Bf16, "131072x127"), 2);
    // Few rows: latency, not coalescing, sets the pace.
    assert_eq!(pack(Operator::Rmsnorm, DType::Bf16, "17x257"), 4);
    // Rows a vector reads, and a sum, are the model's.
    assert_eq!(pack(Operator::Softmax, DType::F32, "16384x76"), 4);
    assert!(pack(Operator::Sum, DType::F32, "16384x75") > 1);
}

/// An element-only program (a residual add, cross entropy's saved-lse
/// backward) keeps each row in one group however long: a cluster shares
/// reductions, and such a program has none (bf16 1024x128256 saved-lse
/// backward on the H200: 174 µs in clusters of 4, 141 µs in one group).
#[test]
fn an_element_only_program_never_spans_a_cluster() {
    for op in [Operator::Add, Operator::CrossEntropyBackward] {
        for dtype in [DType::F32, DType::Bf16] {
            for shape in ["1x1000000", "1024x128256", "2048x256000", "4096x32000"] {
                let p = plan(&typed(op, dtype, shape), &Target::h200(), &automatic()).unwrap();
                assert_eq!(
                    p.groups_per_row,
                    1,
                    "{op} {dtype} {shape}: {}",
                    p.describe()
                );
            }
        }
    }
    // An explicit request may still ask for one.
    let long = typed(Operator::Add, DType::Bf16, "4x131072");
    let p = plan(&long, &Target::h200(), &req(4096, 8)).unwrap();
    assert!(p.groups_per_row > 1, "{}", p.describe());
}

/// SASS of rmsnorm bf16 W=32 V=8 on 1024-wide rows: each chunk's weight
/// load waited on the previous chunk's store; the H200 searches of
/// 2026-12-03 ran the model's picks 1.01-1.42x faster with every chunk's
/// columns loaded before the reduction, on problems within the L2.
#[test]
fn regression_norm_register_plans_of_three_chunks_within_the_l2_load_columns_early() {
    let h200 = Target::h200();
    // (Rows of at most one wave of 256-thread groups take one chunk a
    // worker instead: `regression_short_norm_rows_of_a_wave_take_one_chunk_a_worker`.)
    for (op, dtype, shape) in [
        (Operator::Rmsnorm, DType::Bf16, "2048x2048"),
        (Operator::Rmsnorm, DType::Bf16, "4096x1024"),
        (Operator::Layernorm, DType::Bf16, "2048x4096"),
    ] {
        let p = typed(op, dtype, shape);
        let got = ruled(&p, "before the reduction");
        let chunks = got.layout.chunks(p.shape.n) as u32;
        assert!(chunks >= 3, "{}", got.describe());
        assert_eq!(got.early_columns, chunks.min(8), "{}", got.describe());
    }
    // Not: past the L2, a two-chunk pick, an operator without the
    // evidence, fewer rows than multiprocessors (the ladder decides
    // there), a batch-invariant request, the CPU.
    let p = typed(Operator::Rmsnorm, DType::Bf16, "2048x2048");
    assert_rule_absent(
        "before the reduction",
        &[
            (Operator::Rmsnorm, DType::Bf16, "16384x4096"),
            (Operator::Layernorm, DType::Bf16, "512x2560"),
            (Operator::ResidualLayernorm, DType::Bf16, "512x1024"),
            (Operator::Rmsnorm, DType::Bf16, "64x1024"),
        ],
        &p,
    );
    let invariant = LayoutRequest {
        batch_invariant: true,
        ..automatic()
    };
    assert_eq!(plan(&p, &h200, &invariant).unwrap().early_columns, 0);
}

/// The automatic plan of `p` on the H200, asserting that the rule whose
/// note holds `rule` made it.
fn ruled(p: &Problem, rule: &str) -> Plan {
    let h200 = Target::h200();
    let note = automatic_note(p, &h200, &automatic()).unwrap();
    assert!(note.contains(rule), "{note}");
    plan(p, &h200, &automatic()).unwrap()
}

/// A rule beside the model, named by `note`, leaves these automatic H200
/// plans alone, and `on_cpu`'s plan on the CPU target.
fn assert_rule_absent(note: &str, cases: &[(Operator, DType, &str)], on_cpu: &Problem) {
    for &(op, dtype, shape) in cases {
        let got = automatic_note(&typed(op, dtype, shape), &Target::h200(), &automatic());
        assert!(
            !got.is_some_and(|n| n.contains(note)),
            "{op:?} {dtype:?} {shape}"
        );
    }
    assert!(!automatic_note(on_cpu, &Target::cpu(), &automatic()).is_some_and(|n| n.contains(note)));
}

/// The model picked W=32 with four to six chunks a worker on short rmsnorm
/// rows of a wave or less; in the H200 searches of 2026-12-03 one chunk a
/// worker ran 1.04-1.30x faster than those picks (bf16 512x1024,
/// 1024x1536 and 512x896). Not layernorm: mixed (512x768 lost).
#[test]
fn regression_short_norm_rows_of_a_wave_take_one_chunk_a_worker() {
    let h200 = Target::h200();
    for (op, dtype, shape, workers) in [
        (Operator::Rmsnorm, DType::Bf16, "512x1024", 128),
        (Operator::Rmsnorm, DType::Bf16, "1024x1536", 256),
        (Operator::Rmsnorm, DType::Bf16, "512x896", 128),
        (Operator::Rmsnorm, DType::F32, "512x896", 256),
    ] {
        let p = typed(op, dtype, shape);
        let got = ruled(&p, "at most a wave of 256-thread groups");
        assert_eq!(got.layout.chunks(p.shape.n), 1, "{}", got.describe());
        assert_eq!(got.layout.workers, workers, "{}", got.describe());
    }
    // Not: more rows than a wave of 256-thread groups, fewer rows than
    // multiprocessors, rows of 4096 (one chunk would take W=512), an
    // operator without the evidence, a batch-invariant request, the CPU.
    let p = typed(Operator::Rmsnorm, DType::Bf16, "512x1024");
    assert_rule_absent(
        "at most a wave of 256-thread groups",
        &[
            (Operator::Rmsnorm, DType::Bf16, "2048x1024"),
            (Operator::Rmsnorm, DType::Bf16, "64x1024"),
            (Operator::Rmsnorm, DType::Bf16, "512x4096"),
            (Operator::Layernorm, DType::Bf16, "512x768"),
            (Operator::ResidualLayernorm, DType::Bf16, "512x1024"),
        ],
        &p,
    );
    let invariant = LayoutRequest {
        batch_invariant: true,
        ..automatic()
    };
    assert!(plan(&p, &h200, &invariant).unwrap().layout.chunks(1024) > 1);
}

/// Misaligned rows read scalars until aligned packs: the automatic plan
/// takes them where they measured faster, with 16-byte packs on long
/// rows and narrow ones on many short rows, and leaves them out on
/// decode cross_entropy rows and in f32 cross_entropy. The norms take
/// them where N is no multiple of 4, on at least as many rows as SMs.
#[test]
fn regression_misaligned_rows_read_every_pack_as_scalars() {
    let h200 = Target::h200();
    let auto = |op, dtype, shape| plan(&typed(op, dtype, shape), &h200, &automatic()).unwrap();
    for (op, dtype, shape, pack) in [
        (Operator::CrossEntropy, DType::Bf16, "7168x51866", 8),
        (Operator::CrossEntropyBackward, DType::Bf16, "8192x50257", 8),
        (Operator::Softmax, DType::Bf16, "24576x577", 2),
        (Operator::Softmax, DType::F32, "4096x10001", 4),
        (Operator::CrossEntropy, DType::Bf16, "16x128257", 8),
        (Operator::Rmsnorm, DType::Bf16, "4096x4097", 8),
        (Operator::Layernorm, DType::F32, "16384x2050", 4),
        (Operator::ResidualLayernorm, DType::Bf16, "8192x3003", 8),
    ] {
        let p = auto(op, dtype, shape);
        assert!(p.aligned_packs, "{op} {shape}: {}", p.describe());
        assert_eq!(p.layout.pack, pack, "{op} {shape}: {}", p.describe());
    }
    for (op, dtype, shape) in [
        (Operator::CrossEntropy, DType::Bf16, "64x50257"),
        (Operator::CrossEntropy, DType::F32, "4096x50257"),
        (Operator::Rmsnorm, DType::Bf16, "4096x4100"),
        (Operator::Layernorm, DType::Bf16, "64x4098"),
    ] {
        let p = auto(op, dtype, shape);
        assert!(!p.aligned_packs, "{op} {shape}: {}", p.describe());
    }
    // The CPU target's plans never shift.
    let cpu = plan(
        &typed(Operator::Softmax, DType::Bf16, "24576x577"),
        &Target::cpu(),
        &automatic(),
    )
    .unwrap();
    assert!(!cpu.aligned_packs);
}

/// Misaligned decode rows spanning a cluster read their packs element by
/// element and ran 2.5-3.7x their prediction (residual_layernorm bf16
/// 57x175011 68.7 µs against 21.4 on the H200): rmsnorm and 16-bit
/// residual_layernorm rows of 65536 and more (since 9999) on fewer rows
/// than SMs now take aligned packs. Layernorm, residual_layernorm f32, aligned rows and
/// rows past the SM count keep their plans.
#[test]
fn regression_misaligned_decode_cluster_rows_read_packs_element_by_element() {
    let h200 = Target::h200();
    let auto = |op, dtype, shape| plan(&typed(op, dtype, shape), &h200, &automatic()).unwrap();
    for (op, dtype, shape) in [
        (Operator::Rmsnorm, DType::F32, "16x100003"),
        (Operator::Rmsnorm, DType::Bf16, "8x200001"),
        (Operator::ResidualLayernorm, DType::Bf16, "57x175011"),
        (Operator::ResidualLayernorm, DType::Bf16, "30x200003"),
    ] {
        let p = auto(op, dtype, shape);
        assert!(
            p.aligned_packs && p.groups_per_row > 1,
            "{op} {shape}: {}",
            p.describe()
        );
    }
    for (op, dtype, shape) in [
        (Operator::Layernorm, DType::Bf16, "16x200003"),
        (Operator::ResidualLayernorm, DType::F32, "30x65537"),
        (Operator::Rmsnorm, DType::Bf16, "50x65536"),
    ] {
        let p = auto(op, dtype, shape);
        assert!(!p.aligned_packs, "{op} {shape}: {}", p.describe());
    }
}

/// Misaligned f32 rows under 64 elements, from one row a multiprocessor
/// to eight: one warp a row of scalars, eight rows a group, the layout
/// measured 1.25-1.48x faster than the aligned packs of four the model
/// took. bf16, sums, rows of 64 or whose length is a multiple of 4, and
/// fewer rows than SMs keep the model's pick.
#[test]
fn short_misaligned_f32_rows_from_one_an_sm_take_one_warp_a_row() {
    let h200 = Target::h200();
    let auto = |op, dtype, shape| plan(&typed(op, dtype, shape), &h200, &automatic()).unwrap();
    for (op, shape) in [
        (Operator::Rmsnorm, "1000x37"),
        (Operator::Rmsnorm, "300x61"),
        (Operator::Layernorm, "700x37"),
        (Operator::Softmax, "400x21"),
    ] {
        let p = auto(op, DType::F32, shape);
        assert_eq!(
            (
                p.layout.workers,
                p.layout.pack,
                p.layout.rows_per_group,
                p.aligned_packs
            ),
            (32, 1, 8, false),
            "{op} {shape}: {}",
            p.describe()
        );
    }
    for (op, dtype, shape) in [
        (Operator::Rmsnorm, DType::Bf16, "1000x37"),
        (Operator::Sum, DType::F32, "500x37"),
        (Operator::Rmsnorm, DType::F32, "500x44"),
        (Operator::Rmsnorm, DType::F32, "1000x65"),
        (Operator::Softmax, DType::F32, "100x33"),
    ] {
        assert!(
            auto(op, dtype, shape).layout.pack > 1,
            "{op} {dtype} {shape}"
        );
    }
}

/// bf16 rmsnorm rows of 13000-16384 on tiles of 24-64 MiB: one group of
/// 512 a row. Tiles past the L2, within the early-columns range, f32 and
/// shorter rows keep the model's pick.
#[test]
fn wide_bf16_rmsnorm_rows_within_the_l2_take_one_group_of_512() {
    let h200 = Target::h200();
    let auto =
        |dtype, shape| plan(&typed(Operator::Rmsnorm, dtype, shape), &h200, &automatic()).unwrap();
    for shape in ["1000x16000", "1800x14000", "2200x13504"] {
        let p = auto(DType::Bf16, shape);
        assert_eq!(p.layout.workers, 512, "{shape}: {}", p.describe());
        assert_eq!(p.layout.chunks(p.shape().n), 4, "{shape}: {}", p.describe());
    }
    for (dtype, shape) in [
        (DType::Bf16, "3000x14336"),
        (DType::Bf16, "800x14000"),
        (DType::F32, "1000x14000"),
        (DType::Bf16, "2000x12000"),
    ] {
        let problem = typed(Operator::Rmsnorm, dtype, shape);
        let note = automatic_note(&problem, &h200, &automatic()).unwrap_or_default();
        assert!(!note.contains("13000-16384"), "{dtype} {shape}: {note}");
    }
}

/// Every variant a ladder adds says what it does in `lanefold plan`'s note.
#[test]
fn every_variant_a_ladder_adds_has_a_note() {
    for token in ladder_tokens() {
        assert!(variant_note(token).is_some(), "{token}");
    }
}

/// `lanefold plan` said nothing of the aligned packs the automatic request
/// took on misaligned rows (its note listed the variants by hand).
#[test]
fn regression_the_plan_note_left_out_aligned_packs() {
    let p = typed(Operator::CrossEntropy, DType::Bf16, "4096x50257");
    let note = automatic_note(&p, &Target::h200(), &automatic()).unwrap();
    assert!(note.contains("aligned packs"), "{note}");
    assert!(note.contains("online normalizer"), "{note}");
}

/// 16-bit softmax on rows of 18432-32767 larger than the L2 ran streamed
/// at 2.5-3.1 TB/s; the online normalizer in a W=512 register tile ran
/// 1.11-1.42x faster. Shifted rows over 26000 (76 registers), shorter
/// rows, problems within the L2, f32 and batch invariance keep theirs.
#[test]
fn sixteen_bit_softmax_of_18432_to_32767_past_the_l2_runs_online_in_registers() {
    let t = Target::h200();
    let auto = automatic();
    let chosen = |dtype, shape: &str, r: &LayoutRequest| {
        plan(&typed(Operator::Softmax, dtype, shape), &t, r).unwrap()
    };
    for shape in [
        "12288x18432",
        "4096x20001",
        "6144x26000",
        "8192x30720",
        "4096x32760",
    ] {
        let p = chosen(DType::Bf16, shape, &auto);
        assert_eq!(
            (
                p.layout.workers,
                p.layout.pack,
                p.layout.unroll,
                p.residency
            ),
            (512, 8, 4, Residency::Registers),
            "{shape}: {}",
            p.describe()
        );
        assert!(
            p.describe().contains("online-normalizer"),
            "{shape}: {}",
            p.describe()
        );
        let f16 = chosen(DType::F16, shape, &auto);
        assert_eq!(f16.describe(), p.describe().replace("bf16", "f16"));
    }
    for (dtype, shape) in [
        (DType::Bf16, "8192x30522"),  // shifted, over 26000
        (DType::Bf16, "16384x16385"), // shorter
        (DType::Bf16, "1024x20000"),  // within the L2
        (DType::Bf16, "8192x32768"),  // packed
        (DType::F32, "8192x20480"),
    ] {
        let p = chosen(dtype, shape, &auto);
        assert!(
            !p.describe().contains("online-normalizer"),
            "{shape}: {}",
            p.describe()
        );
    }
    // The note names the model's pick only where the rule moved it.
    let note =
        |shape| automatic_note(&typed(Operator::Softmax, DType::Bf16, shape), &t, &auto).unwrap();
    assert!(
        note("8192x30720").ends_with("the cost model's pick as well"),
        "{}",
        note("8192x30720")
    );
    assert!(
        note("6144x26000").contains("replaces the cost model's pick W=128"),
        "{}",
        note("6144x26000")
    );
    let invariant = LayoutRequest {
        batch_invariant: true,
        ..auto
    };
    let p = chosen(DType::Bf16, "8192x30720", &invariant);
    assert!(
        !p.describe().contains("online-normalizer"),
        "{}",
        p.describe()
    );
}

/// bf16 softmax rows of 32769-65535 past the L2 kept the model's
/// register pick where the row does not split into whole chunks: the
/// ladder asks for a packed tile, legality leaves it unpacked (109-243
/// registers, one group per SM) and the streamed rule read the request's
/// packing, not the plan's; from 58000 the model picked clusters, which
/// no rule replaced. They stream now in 512-worker groups.
#[test]
fn regression_long_bf16_softmax_kept_an_unpacked_register_tile() {
    let h200 = Target::h200();
    let auto =
        |dtype, shape| plan(&typed(Operator::Softmax, dtype, shape), &h200, &automatic()).unwrap();
    for shape in ["4096x36000", "2048x50257", "2048x60001", "8192x33000"] {
        let p = auto(DType::Bf16, shape);
        assert_eq!(p.residency, Residency::Stream, "{shape}: {}", p.describe());
        assert!(p.reread_hints, "{shape}: {}", p.describe());
        assert_eq!(
            (p.layout.workers, p.layout.pack, p.groups_per_row),
            (512, 8, 1),
            "{shape}: {}",
            p.describe()
        );
    }
    // Whole chunks keep their packed tiles; rows within the L2 and from
    // 65536 keep theirs, and so does f16 (not measured).
    for (dtype, shape) in [
        (DType::Bf16, "4096x32768"),
        (DType::Bf16, "4096x45056"),
        (DType::Bf16, "64x40000"),
        (DType::Bf16, "4096x65536"),
        (DType::F16, "4096x36000"),
    ] {
        let p = auto(dtype, shape);
        assert_eq!(
            p.residency,
            Residency::Registers,
            "{shape}: {}",
            p.describe()
        );
    }
}

#[test]
fn few_cross_entropy_rows_of_40000_to_131072_span_a_cluster() {
    // One group a row left most SMs idle: four groups of 512 ran 1.09-1.82x
    // faster up to 48 rows, two of 1024 1.05-1.18x at 64, eight 1.05-1.42x
    // over four on up to 12 rows of 160 KB or more; past one wave of four,
    // groups of 256 1.01-1.14x over 512 on rows of up to 256 KB (A B B A,
    // rows of no list, L2 warm).
    let t = Target::h200();
    let auto = automatic();
    for (op, dtype, shape, groups, threads) in [
        (Operator::CrossEntropy, DType::F32, "8x128000", 8, 512),
        (Operator::CrossEntropy, DType::Bf16, "12x80000", 8, 512),
        (Operator::CrossEntropy, DType::Bf16, "12x60000", 4, 512),
        (Operator::CrossEntropy, DType::F32, "16x100000", 4, 512),
        (Operator::CrossEntropy, DType::Bf16, "24x100000", 4, 512),
        (Operator::CrossEntropy, DType::F32, "33x50000", 4, 512),
        (Operator::CrossEntropy, DType::F32, "34x50000", 4, 256),
        (Operator::CrossEntropy, DType::Bf16, "42x128000", 4, 256),
        (
            Operator::CrossEntropyWithLse,
            DType::Bf16,
            "48x65536",
            4,
            256,
        ),
        (Operator::CrossEntropy, DType::F32, "48x88000", 4, 512),
        (Operator::CrossEntropy, DType::F32, "64x64000", 2, 1024),
        (Operator::CrossEntropy, DType::Bf16, "66x40000", 2, 1024),
        // Misaligned rows, in aligned packs (1.33-1.56x, H200).
        (Operator::CrossEntropy, DType::Bf16, "24x100001", 4, 512),
        (Operator::CrossEntropy, DType::F32, "24x70001", 4, 512),
        (Operator::CrossEntropy, DType::Bf16, "40x100003", 4, 256),
    ] {
        let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
        assert_eq!(
            (p.layout.workers, p.groups_per_row, p.threads_per_group),
            (groups * threads, groups, threads),
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
        assert!(
            p.pushed_cluster_reduce && p.online_normalizer(),
            "{}",
            p.describe()
        );
        // A cluster of 1024 threads or fewer only with split-groups.
        assert_eq!(p.schedule().split_groups, groups * threads <= 1024);
        let shifted = !(p_n(shape) * dtype.size_bytes()).is_multiple_of(16);
        assert_eq!(p.aligned_packs, shifted, "{shape}: {}", p.describe());
        let note = automatic_note(&typed(op, dtype, shape), &t, &auto).unwrap_or_default();
        assert!(note.contains("a cluster a row"), "{note}");
    }
    // Rows enough for one group on most SMs (96, 128: 0.63-0.78x in a
    // cluster), rows of 32000 (at par or slower), f16 and the backward
    // keep the model's pick: one group a row.
    for (op, dtype, shape) in [
        (Operator::CrossEntropy, DType::F32, "67x60000"),
        (Operator::CrossEntropy, DType::Bf16, "128x50000"),
        (Operator::CrossEntropy, DType::F32, "32x32000"),
        (Operator::CrossEntropy, DType::Bf16, "82x100890"),
        (Operator::CrossEntropy, DType::Bf16, "8x120001"),
        (Operator::CrossEntropy, DType::F16, "24x100000"),
        (Operator::CrossEntropyBackward, DType::Bf16, "24x100000"),
    ] {
        let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
        assert_eq!(
            p.groups_per_row,
            1,
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
    }
}

/// Decode cross-entropy in two groups of 1024 a row unrolls by 8 where
/// eight stripes cover the row and four do not (measured f32 1.07-1.11x,
/// bf16 1.09-1.16x on 52-64 rows); other rows keep U=4.
#[test]
fn decode_cross_entropy_in_two_groups_loads_the_row_in_one_step() {
    let t = Target::h200();
    let auto = automatic();
    for (dtype, shape, unroll) in [
        (DType::F32, "64x50432", 8),
        (DType::F32, "52x44000", 8),
        (DType::F32, "60x64000", 8),
        (DType::F32, "64x70000", 4),
        (DType::F32, "33x50000", 4),
        // bf16 rows take five to eight stripes of 16384 from 65537.
        (DType::Bf16, "64x50432", 4),
        (DType::Bf16, "56x90000", 8),
        (DType::Bf16, "64x128256", 8),
        (DType::Bf16, "60x65536", 4),
    ] {
        let p = plan(&typed(Operator::CrossEntropy, dtype, shape), &t, &auto).unwrap();
        assert_eq!(p.layout.unroll, unroll, "{dtype} {shape}: {}", p.describe());
        if (dtype, shape) == (DType::F32, "64x50432") {
            // The schedule the corpus's gpt-neox-20b row was measured with.
            assert_eq!(
                p.schedule().to_string(),
                "W=2048 V=4 U=8 G=1 registers push-reduce online-normalizer group-threads=1024"
            );
        }
    }
}

#[test]
fn equal_predictions_across_group_sizes_go_to_fewer_registers() {
    // The model priced W=256 and W=512 on f32 rows of 11008 the very same;
    // ties went by registers only within one group size, so the first of
    // them stayed (W=256, 43 values a thread), 0.93x of torch.compile on
    // rmsnorm f32 2048x11008. W=512 ran 1.02-1.05x faster on four such
    // rows, 0.97-1.0x on two; one group of 256 on ~500 rows 1.12-1.47x
    // faster than two rows of 32-64 workers.
    let t = Target::h200();
    let auto = automatic();
    for (op, dtype, shape, workers, rows_per_group) in [
        (Operator::Rmsnorm, DType::F32, "2048x11008", 512, 1),
        (Operator::Rmsnorm, DType::F32, "3072x12800", 512, 1),
        (Operator::Softmax, DType::F32, "6000x13000", 512, 1),
        (Operator::Rmsnorm, DType::F32, "480x4096", 256, 1),
        (Operator::Softmax, DType::F32, "520x5120", 256, 1),
        // Within one group size the registers decide as before.
        (Operator::Rmsnorm, DType::Bf16, "1024x4096", 128, 2),
        // Backwards keep the first of the tied group sizes (unmeasured).
        (Operator::RmsnormBackward, DType::F32, "16384x4096", 256, 1),
    ] {
        let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
        assert_eq!(
            (p.layout.workers, p.layout.rows_per_group),
            (workers, rows_per_group),
            "{op} {dtype} {shape}: {}",
            p.describe()
        );
    }
    // `lanefold plan` says so where the step moved the model's pick.
    let note = automatic_note(
        &typed(Operator::Rmsnorm, DType::F32, "2048x11008"),
        &t,
        &auto,
    )
    .unwrap_or_default();
    assert!(
        note.contains("in place of its pick W=256 V=4 U=4 G=1 registers"),
        "{note}"
    );
    let note = automatic_note(
        &typed(Operator::RmsnormBackward, DType::F32, "16384x4096"),
        &t,
        &auto,
    );
    assert!(note.is_none(), "{note:?}");
}

/// The choice stays small enough to read: its three files hold at most
/// 1,500 lines of code (neither comments nor blank lines nor their unit
/// tests), so a new rule has to replace one or earn its place.
#[test]
fn the_choice_code_stays_under_1500_lines() {
    let code = |source: &str| {
        let end = source
            .find("#[cfg(test)]\nmod tests")
            .unwrap_or(source.len());
        source[..end]
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//"))
            .count()
    };
    let lines = code(include_str!("mod.rs"))
        + code(include_str!("rules.rs"))
        + code(include_str!("model.rs"));
    assert!(lines <= 1500, "{lines} lines of choice code");
    assert!(lines > 500, "{lines}: the files were not read");
}

/// Norm decode rows of 7000-28000 on at most half the SMs: spread over
/// as many pushed groups of 512 as keep the rows in one wave (at most the
/// row's packs), one group of 1024 where that is two; the campaign's
/// B plans. Past half the SMs, misaligned rows and f16 keep the former
/// pick.
#[test]
fn decode_norm_rows_spread_over_one_wave() {
    let t = Target::h200();
    let auto = automatic();
    for (op, dtype, shape, schedule) in [
        (
            Operator::Rmsnorm,
            DType::F32,
            "8x12000",
            "W=4096 V=4 U=1 G=1 registers unfolded-addresses push-reduce",
        ),
        (
            Operator::Rmsnorm,
            DType::F32,
            "24x20000",
            "W=2048 V=4 U=1 G=1 registers push-reduce",
        ),
        (
            Operator::Rmsnorm,
            DType::F32,
            "48x9000",
            "W=1024 V=4 U=1 G=1 registers",
        ),
        (
            Operator::Rmsnorm,
            DType::Bf16,
            "60x15000",
            "W=1024 V=8 U=1 G=1 registers",
        ),
        (
            Operator::Layernorm,
            DType::F32,
            "20x11000",
            "W=2048 V=4 U=1 G=1 registers push-reduce one-pass-moments",
        ),
        (
            Operator::ResidualLayernorm,
            DType::F32,
            "12x7000",
            "W=2048 V=4 U=1 G=1 registers unfolded-addresses push-reduce one-pass-moments",
        ),
        (
            Operator::Rmsnorm,
            DType::F32,
            "70x14272",
            "W=512 V=4 U=1 G=1 registers",
        ),
        (
            Operator::Rmsnorm,
            DType::F32,
            "16x14273",
            "W=512 V=4 U=1 G=1 registers aligned-packs",
        ),
    ] {
        let p = plan(&typed(op, dtype, shape), &t, &auto).unwrap();
        assert_eq!(p.schedule().to_string(), schedule, "{op} {dtype} {shape}");
    }
}

/// Regression: once aligned packs reached a cluster's groups, the model
/// put misaligned bf16 cross-entropy rows in clusters of aligned packs,
/// which ran 0.89x (96x200003, H100); its cluster candidates are priced
/// without them, as measured, while softmax keeps them (1.73-1.97x).
/// (Rows past half the SMs now take four pushed groups of 256 in aligned
/// packs, measured faster than both: the shape here has fewer.)
#[test]
fn regression_cross_entropy_clusters_keep_unshifted_packs() {
    let t = Target::h200();
    let auto = automatic();
    for (shape, schedule) in [
        (
            "60x200003",
            "W=4096 V=4 U=8 G=1 registers push-reduce online-normalizer",
        ),
        (
            "1414x189817",
            "W=512 V=8 U=4 G=1 registers online-normalizer aligned-packs",
        ),
    ] {
        let p = plan(
            &typed(Operator::CrossEntropy, DType::Bf16, shape),
            &t,
            &auto,
        )
        .unwrap();
        assert_eq!(p.schedule().to_string(), schedule, "{shape}");
    }
    let softmax = plan(
        &typed(Operator::Softmax, DType::Bf16, "300x150001"),
        &t,
        &auto,
    )
    .unwrap();
    assert!(
        softmax.aligned_packs && softmax.groups_per_row > 1,
        "{}",
        softmax.describe()
    );
}

/// Long f32 layernorm rows take early columns only where part of the row
/// sits in shared memory, as the rung was measured; register tiles of
/// 140000-150000 ran 1.08-1.23x faster without them (H100).
#[test]
fn long_f32_layernorm_register_tiles_load_columns_in_turn() {
    let t = Target::h200();
    let auto = automatic();
    for (shape, early) in [
        ("800x150000", false),
        ("1087x145920", false),
        ("4096x131072", true),
        ("1024x262144", true),
    ] {
        let p = plan(&typed(Operator::Layernorm, DType::F32, shape), &t, &auto).unwrap();
        assert_eq!(p.early_columns > 0, early, "{shape}: {}", p.describe());
        assert_eq!(
            p.shared_chunks.is_some(),
            early,
            "{shape}: {}",
            p.describe()
        );
    }
}

/// bf16 residual_layernorm on 16-byte rows of 257-512, fewer rows than
/// SMs: one chunk a worker (1.16-1.19x over one warp a row, H200 A B B A);
/// f32 (1.045x, under the bar), misaligned and longer rows keep the
/// model's pick.
#[test]
fn few_bf16_residual_rows_of_257_to_512_take_one_chunk() {
    let t = Target::h200();
    let auto = automatic();
    for shape in ["30x416", "8x320", "2x344", "50x480"] {
        let p = plan(
            &typed(Operator::ResidualLayernorm, DType::Bf16, shape),
            &t,
            &auto,
        )
        .unwrap();
        assert_eq!(
            (p.layout.workers, p.layout.chunks(p_n(shape))),
            (64, 1),
            "{shape}: {}",
            p.describe()
        );
    }
    for (dtype, shape) in [
        (DType::F32, "40x448"),
        (DType::Bf16, "3x194"),
        (DType::Bf16, "200x640"),
    ] {
        let p = plan(&typed(Operator::ResidualLayernorm, dtype, shape), &t, &auto).unwrap();
        assert_ne!(
            (p.layout.workers, p.layout.chunks(p_n(shape))),
            (64, 1),
            "{dtype} {shape}: {}",
            p.describe()
        );
    }
}

/// The row length of a shape written `ROWSxN`.
fn p_n(shape: &str) -> usize {
    shape.parse::<Shape>().unwrap().n
}

/// Aligned 16-bit residual_layernorm rows up to 512 on fewer rows than
/// multiprocessors, one chunk a worker, load the chunk's weight and bias
/// before the row's exchange (1.06-1.07x on seven rows, H100 A B B A);
/// plans of more chunks (0.89-0.96x on three of four) and rows of
/// 1536-5120 (0.97-0.98x) keep the late loads, as does a batch-invariant
/// request.
#[test]
fn regression_residual_layernorm_short_16_bit_decode_rows_load_columns_early() {
    let h200 = Target::h200();
    for (dtype, shape, early) in [
        (DType::Bf16, "7x448", true),
        (DType::Bf16, "60x800", false),
        (DType::Bf16, "3x300", false),
        (DType::F16, "2x344", true),
        (DType::Bf16, "16x1536", false),
        (DType::Bf16, "200x448", false),
    ] {
        let p = typed(Operator::ResidualLayernorm, dtype, shape);
        let got = plan(&p, &h200, &automatic()).unwrap();
        assert_eq!(got.early_columns > 0, early, "{shape}: {}", got.describe());
    }
    let p = typed(Operator::ResidualLayernorm, DType::Bf16, "7x448");
    let invariant = LayoutRequest {
        batch_invariant: true,
        ..automatic()
    };
    assert_eq!(plan(&p, &h200, &invariant).unwrap().early_columns, 0);
}

/// Misaligned norm decode rows of 9999-65535 ran their plain plans
/// 1.05-2.11x slower than in aligned packs (rmsnorm f32 24x21035 13.0
/// against 6.2 µs, H100); rows of about 2050, f32 layernorm and layernorm
/// past 65535 keep theirs. The 16-bit ones in 8-byte packs: 16-byte packs
/// ran 0.80-0.96x on five of six (H100).
#[test]
fn regression_misaligned_norm_decode_rows_from_9999_read_aligned_packs() {
    let h200 = Target::h200();
    for (op, shape) in [
        (Operator::Rmsnorm, "24x21035"),
        (Operator::Rmsnorm, "60x9999"),
        (Operator::Layernorm, "24x21035"),
        (Operator::ResidualLayernorm, "32x20001"),
    ] {
        let got = plan(&typed(op, DType::Bf16, shape), &h200, &automatic()).unwrap();
        assert_eq!(got.layout.pack, 4, "{op} {shape}: {}", got.describe());
    }
    // Past the span, and at least as many rows as SMs, 16-byte packs stay.
    for (op, shape) in [
        (Operator::Rmsnorm, "8x200001"),
        (Operator::Rmsnorm, "1024x12289"),
    ] {
        let got = plan(&typed(op, DType::Bf16, shape), &h200, &automatic()).unwrap();
        assert!(got.aligned_packs, "{op} {shape}: {}", got.describe());
        assert_eq!(got.layout.pack, 8, "{op} {shape}: {}", got.describe());
    }
    let h200 = Target::h200();
    for (op, dtype, shape, aligned) in [
        (Operator::Rmsnorm, DType::F32, "24x21035", true),
        (Operator::Rmsnorm, DType::Bf16, "60x9999", true),
        (Operator::Layernorm, DType::Bf16, "24x21035", true),
        (Operator::ResidualLayernorm, DType::Bf16, "32x20001", true),
        (Operator::Rmsnorm, DType::Bf16, "64x2050", false),
        (Operator::Layernorm, DType::F32, "24x21035", false),
        (Operator::Layernorm, DType::Bf16, "16x200003", false),
    ] {
        let p = typed(op, dtype, shape);
        let got = plan(&p, &h200, &automatic()).unwrap();
        assert_eq!(
            got.aligned_packs,
            aligned,
            "{op} {dtype} {shape}: {}",
            got.describe()
        );
    }
}

/// f32 rmsnorm rows of 20000-28000 on one to two rows an SM: the model's
/// narrow picks (W=128-256) ran 1.26-2.19x slower than one group of 1024
/// a row (the drawn 245x24768 29.4 against 20.8 µs, H100). Shorter rows,
/// more rows, bf16 and softmax keep the model's pick.
#[test]
fn regression_one_wave_f32_rmsnorm_rows_of_20000_take_a_full_group() {
    for shape in ["200x20000", "245x24768", "260x28000"] {
        let p = typed(Operator::Rmsnorm, DType::F32, shape);
        let got = ruled(&p, "one group of 1024");
        assert_eq!(got.layout.workers, 1024, "{shape}: {}", got.describe());
        assert_eq!(got.early_columns, 0, "{shape}: {}", got.describe());
    }
    let p = typed(Operator::Rmsnorm, DType::F32, "245x24768");
    assert_rule_absent(
        "one group of 1024 a row (the narrow picks",
        &[
            (Operator::Rmsnorm, DType::F32, "180x16000"),
            (Operator::Rmsnorm, DType::F32, "265x20000"),
            (Operator::Rmsnorm, DType::Bf16, "245x24768"),
            (Operator::Softmax, DType::F32, "245x24768"),
        ],
        &p,
    );
}

/// Misaligned norm rows under 256 on one to two rows an SM ran 1.23-1.32x
/// faster in their plain packs than in aligned ones (the drawn
/// residual_layernorm f32 152x105 2.28 against 1.79 µs, H100): the
/// aligned-packs rung of the norms starts at 256.
#[test]
fn regression_misaligned_norm_rows_under_256_keep_plain_packs() {
    let h200 = Target::h200();
    for (op, dtype, shape, aligned) in [
        (Operator::ResidualLayernorm, DType::F32, "152x105", false),
        (Operator::Layernorm, DType::F32, "160x105", false),
        (Operator::Rmsnorm, DType::Bf16, "250x201", false),
        (Operator::Rmsnorm, DType::F32, "170x255", false),
        (Operator::Rmsnorm, DType::Bf16, "250x257", true),
        (Operator::Layernorm, DType::Bf16, "24576x803", true),
    ] {
        let got = plan(&typed(op, dtype, shape), &h200, &automatic()).unwrap();
        assert_eq!(
            got.aligned_packs,
            aligned,
            "{op} {dtype} {shape}: {}",
            got.describe()
        );
    }
}

/// Cross-entropy rows between half the SMs and all of them, where the
/// model spanned a cluster of 1024-thread groups, ran 1.04-1.41x slower
/// than in four pushed groups of 256 (f32 75x120000 23.3 against 16.5 µs,
/// H100); misaligned ones in aligned packs, 1.02-1.24x (bf16 100x150001
/// 18.5 against 15.0 µs). One-group picks (0.97-1.13x), fewer or more
/// rows keep the model's pick.
#[test]
fn regression_ce_rows_past_half_the_sms_in_clusters_take_four_small_groups() {
    for (dtype, shape) in [
        (DType::Bf16, "100x180000"),
        (DType::Bf16, "90x250000"),
        (DType::F32, "75x120000"),
        (DType::F32, "120x70000"),
        (DType::Bf16, "100x150001"),
        (DType::F32, "90x100003"),
    ] {
        let p = typed(Operator::CrossEntropy, dtype, shape);
        let got = ruled(&p, "in four groups of 256 a row, pushed");
        assert_eq!(
            (
                got.layout.workers,
                got.threads_per_group,
                got.groups_per_row,
                got.pushed_cluster_reduce
            ),
            (1024, 256, 4, true),
            "{shape}: {}",
            got.describe()
        );
    }
    let p = typed(Operator::CrossEntropy, DType::F32, "75x120000");
    assert_rule_absent(
        "in four groups of 256 a row, pushed",
        &[
            (Operator::CrossEntropy, DType::Bf16, "70x128256"),
            (Operator::CrossEntropy, DType::Bf16, "82x100890"),
            (Operator::CrossEntropy, DType::Bf16, "140x128256"),
            (Operator::CrossEntropy, DType::F32, "100x300000"),
        ],
        &p,
    );
}

/// Residual layernorm rows of 26000-31000 past the L2, picked in fenced
/// clusters, ran 1.20-1.62x slower than in a pushed cluster of eight
/// groups of 256 (the drawn bf16 1839x28352 250.8 against 157.0 µs, H100).
/// Rows within the L2, misaligned rows and shorter rows keep the model's
/// pick.
#[test]
fn regression_residual_layernorm_fenced_clusters_past_the_l2_push() {
    for (dtype, shape, pack) in [
        (DType::Bf16, "1839x28352", 8),
        (DType::Bf16, "1300x31000", 8),
        (DType::F32, "1200x26000", 4),
    ] {
        let p = typed(Operator::ResidualLayernorm, dtype, shape);
        let got = ruled(&p, "picked in a fenced cluster");
        assert_eq!(
            (
                got.layout.workers,
                got.layout.pack,
                got.groups_per_row,
                got.pushed_cluster_reduce
            ),
            (2048, pack, 8, true),
            "{shape}: {}",
            got.describe()
        );
    }
    let p = typed(Operator::ResidualLayernorm, DType::Bf16, "1839x28352");
    assert_rule_absent(
        "picked in a fenced cluster",
        &[
            (Operator::ResidualLayernorm, DType::Bf16, "200x28352"),
            (Operator::ResidualLayernorm, DType::Bf16, "1839x28353"),
            (Operator::ResidualLayernorm, DType::F32, "1500x24000"),
            (Operator::Layernorm, DType::Bf16, "1839x28352"),
        ],
        &p,
    );
}

/// rmsnorm and layernorm rows of 65536-131071 spanned fenced clusters,
/// 1.035-1.17x slower than the same layout pushed (rmsnorm f32 551x104293
/// 221.1 against 193.3 µs, H100). Only the push is added: the layout
/// stays the model's.
#[test]
fn regression_norm_clusters_under_131072_push_their_partials() {
    let h200 = Target::h200();
    for (op, dtype, shape) in [
        (Operator::Layernorm, DType::Bf16, "1000x70000"),
        (Operator::Rmsnorm, DType::F32, "551x104293"),
        (Operator::Rmsnorm, DType::F32, "2000x80000"),
        (Operator::Rmsnorm, DType::Bf16, "600x70000"),
        (Operator::Layernorm, DType::F32, "800x90000"),
    ] {
        let p = typed(op, dtype, shape);
        let got = plan(&p, &h200, &automatic()).unwrap();
        let model = automatic_note(&p, &h200, &automatic()).unwrap();
        assert!(
            got.pushed_cluster_reduce,
            "{op} {shape}: {}",
            got.describe()
        );
        assert!(
            model.contains("the same layout, partials pushed"),
            "{model}"
        );
        let fenced = got.describe().replace(" push-reduce", "");
        assert!(model.contains(&fenced), "{fenced} in {model}");
    }
    let p = typed(Operator::Rmsnorm, DType::F32, "551x104293");
    assert_rule_absent(
        "the same layout, partials pushed",
        &[
            (Operator::Softmax, DType::Bf16, "1000x60000"),
            (Operator::Rmsnorm, DType::F32, "300x60000"),
        ],
        &p,
    );
}

/// bf16 residual_layernorm rows of 257-512 on many rows ran one warp a
/// row in two chunks, 1.10-1.16x slower than one chunk a worker in
/// 256-thread groups (the drawn 605x304 2.85 against 2.47 µs, H100).
/// bf16 layernorm (0.80x on 20000x384), f32 and misaligned rows keep the
/// model's pick.
#[test]
fn regression_short_bf16_residual_rows_on_many_rows_take_one_chunk() {
    let h200 = Target::h200();
    for shape in ["605x304", "2000x352", "10000x400", "900x496"] {
        let p = typed(Operator::ResidualLayernorm, DType::Bf16, shape);
        let got = plan(&p, &h200, &automatic()).unwrap();
        assert_eq!(
            (
                got.layout.workers,
                got.layout.rows_per_group,
                got.layout.chunks(p.shape.n)
            ),
            (64, 4, 1),
            "{shape}: {}",
            got.describe()
        );
    }
    for (op, dtype, shape) in [
        (Operator::Layernorm, DType::Bf16, "20000x384"),
        (Operator::ResidualLayernorm, DType::F32, "7833x192"),
        (Operator::ResidualLayernorm, DType::Bf16, "2000x353"),
    ] {
        let got = plan(&typed(op, dtype, shape), &h200, &automatic()).unwrap();
        assert_ne!(
            got.layout.workers,
            64,
            "{op} {dtype} {shape}: {}",
            got.describe()
        );
    }
}

/// Regression: the rules beside the model were handed the model's pick
/// planned on the default group size, so a pick of 256-thread cluster
/// groups (rmsnorm f32 2000x80000: eight groups of 256) reached them, and
/// `lanefold plan`'s note, as four groups of 512.
#[test]
fn regression_rules_see_the_model_pick_on_its_own_group_size() {
    let h200 = Target::h200();
    let p = typed(Operator::Rmsnorm, DType::F32, "2000x80000");
    let got = plan(&p, &h200, &automatic()).unwrap();
    assert_eq!(got.threads_per_group, 256, "{}", got.describe());
    let note = automatic_note(&p, &h200, &automatic()).unwrap();
    let pick = note
        .split("the cost model's pick ")
        .nth(1)
        .unwrap_or_default();
    assert!(
        pick.contains("cluster=8") && pick.contains("group-threads=256"),
        "{note}"
    );
}

/// The range rules hold for the target they were measured on: the CPU
/// executor's target takes the cost model's pick where the H200's takes a
/// rule (here the whole-row stream of rows of 4096-8192 past the L2, which
/// asks nothing of the SM count).
#[test]
fn range_rules_apply_to_the_h200_target_only() {
    let p = typed(Operator::Softmax, DType::F32, "5873x4483");
    let h200 = automatic_note(&p, &Target::h200(), &automatic()).unwrap();
    assert!(h200.contains("rows of 4096-8192"), "{h200}");
    let cpu = Target::cpu();
    let note = automatic_note(&p, &cpu, &automatic());
    assert!(note.is_none(), "{note:?}");
    let got = plan(&p, &cpu, &automatic()).unwrap();
    assert_eq!(got.residency, Residency::Registers, "{}", got.describe());
}
