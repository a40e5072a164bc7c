use super::*;
use crate::testing::{automatic, problem, req, typed};
use crate::{occupancy_step_to_try, plan};
use lanefold_ir::{BufferKind, Builder, DType, Operator, OperatorOptions};

#[test]
fn invalid_widths_are_refused() {
    let p = problem(Operator::Rmsnorm, "4x4096");
    let t = Target::h200();
    for r in [req(48, 1), req(32, 3), req(16384, 1)] {
        assert!(
            matches!(plan(&p, &t, &r), Err(Refusal::InvalidWidth(_))),
            "{r:?}"
        );
    }
    let too_many = LayoutRequest {
        rows_per_group: 8,
        ..req(256, 1)
    };
    assert!(matches!(
        plan(&p, &t, &too_many),
        Err(Refusal::InvalidWidth(_))
    ));
}

#[test]
fn missing_permission_is_refused_and_auto_falls_back_to_one_worker() {
    let exact = Problem {
        program: Operator::Sum.program(OperatorOptions::default()).exact(),
        ..problem(Operator::Sum, "4x4096")
    };
    let t = Target::h200();
    let err = plan(&exact, &t, &req(32, 1)).unwrap_err();
    assert!(matches!(err, Refusal::MissingPermission(_)), "{err}");
    let auto = plan(&exact, &t, &LayoutRequest::default()).unwrap();
    assert_eq!(auto.layout.workers, 1);
    assert_eq!(auto.order, ReductionOrder::Sequential);
    // An explicit exact request on a permitting program is honoured too.
    let seq = LayoutRequest {
        order: Some(ReductionOrder::Sequential),
        ..req(64, 1)
    };
    assert!(matches!(
        plan(&problem(Operator::Sum, "4x4096"), &t, &seq),
        Err(Refusal::MissingPermission(_))
    ));
}

#[test]
fn max_only_programs_need_no_permission() {
    let mut b = Builder::new("rowmax");
    let x = b.input("x", BufferKind::Row);
    let m = b.reduce(lanefold_ir::ReduceOp::Max, x);
    b.output("m", BufferKind::RowScalar, m);
    let p = Problem {
        program: b.finish().exact(),
        dtype: DType::F32,
        shape: "2x100".parse().unwrap(),
    };
    assert!(plan(&p, &Target::h200(), &req(32, 1)).is_ok());
}

#[test]
fn resource_overflow_is_refused() {
    let t = Target::h200();
    let p = problem(Operator::Layernorm, "2x262144");
    let forced = LayoutRequest {
        residency: ResidencyRequest::Registers,
        ..req(32, 4)
    };
    let err = plan(&p, &t, &forced).unwrap_err();
    assert!(
        matches!(
            err,
            Refusal::ResourceOverflow {
                resource: "private slots",
                ..
            }
        ),
        "{err}"
    );
    // Automatic residency streams instead of refusing.
    let auto = plan(&p, &t, &req(32, 4)).unwrap();
    assert_eq!(auto.residency, Residency::Stream);

    let tiny = Target {
        shared_bytes_per_group: 8,
        ..Target::h200()
    };
    let err = plan(&problem(Operator::Softmax, "4x4096"), &tiny, &req(1024, 1)).unwrap_err();
    assert!(matches!(
        err,
        Refusal::ResourceOverflow {
            resource: "shared memory",
            ..
        }
    ));

    let few_registers = Target {
        registers_per_group: 16 * 1024,
        ..Target::h200()
    };
    let err = plan(
        &problem(Operator::Sum, "4x4096"),
        &few_registers,
        &req(1024, 8),
    )
    .unwrap_err();
    assert!(matches!(
        err,
        Refusal::ResourceOverflow {
            resource: "registers",
            ..
        }
    ));
}

#[test]
fn element_only_program_refuses_a_reduction_layout() {
    let p = problem(Operator::Add, "4x4096");
    let r = LayoutRequest {
        order: Some(ReductionOrder::Sequential),
        ..Default::default()
    };
    assert!(matches!(
        plan(&p, &Target::h200(), &r),
        Err(Refusal::ElementOnly(_))
    ));
    assert!(plan(&p, &Target::h200(), &LayoutRequest::default()).is_ok());
}

/// Smaller cluster groups: W=2048 over 8 groups of 256 threads (the
/// tree's levels follow), named in `describe`; sizes that are not a
/// power of two from a warp to a group are refused.
#[test]
fn cluster_group_threads_resize_a_rows_groups() {
    let p = problem(Operator::Softmax, "2x131072");
    let t = Target::h200();
    let req = |threads| LayoutRequest {
        workers: 2048,
        pack: 4,
        cluster_group_threads: threads,
        ..Default::default()
    };
    let small = plan(&p, &t, &req(256)).unwrap();
    assert_eq!((small.groups_per_row, small.threads_per_group), (8, 256));
    assert_eq!(
        (small.tree.lanes, small.tree.warps, small.tree.groups),
        (32, 8, 8)
    );
    assert!(small.describe().contains("cluster=8 group-threads=256"));
    let default = plan(&p, &t, &req(0)).unwrap();
    assert_eq!(
        (default.groups_per_row, default.threads_per_group),
        (4, 512)
    );
    assert!(!default.describe().contains("group-threads"));
    for bad in [16, 384, 2048] {
        assert!(
            matches!(plan(&p, &t, &req(bad)), Err(Refusal::InvalidWidth(_))),
            "{bad}"
        );
    }
    // The widest row shrinks with the groups: 16 groups of 256.
    let too_wide = LayoutRequest {
        workers: 8192,
        ..req(256)
    };
    assert!(plan(&p, &t, &too_wide).is_err());
}

#[test]
fn split_groups_spread_a_row_within_the_group_limit_over_a_cluster() {
    // Quack's decode cross-entropy shape: a few hundred workers a row over
    // two or four multiprocessors.
    let p = typed(Operator::CrossEntropy, DType::F32, "56x45000");
    let t = Target::h200();
    for (text, groups, threads) in [
        (
            "W=512 V=4 U=4 G=1 registers push-reduce split-groups group-threads=256",
            2,
            256,
        ),
        (
            "W=1024 V=4 U=4 G=1 registers split-groups group-threads=256",
            4,
            256,
        ),
        // The target's own group size.
        ("W=1024 V=4 U=4 G=1 registers split-groups", 2, 512),
    ] {
        let request: LayoutRequest = text.parse().unwrap();
        let split = plan(&p, &t, &request).unwrap();
        assert_eq!(
            (split.groups_per_row, split.threads_per_group),
            (groups, threads),
            "{text}: {}",
            split.describe()
        );
        // The schedule says so, and plans to the same layout.
        assert!(split.schedule().split_groups, "{text}");
        let again = plan(&p, &t, &split.schedule()).unwrap();
        assert_eq!(again.describe(), split.describe(), "{text}");
    }
    // Without it a named size leaves a row within the limit in one group
    // (as results recorded before the token meant), rows past the limit
    // need no token, and the automatic choice never splits one.
    let one: LayoutRequest = "W=1024 V=4 U=4 G=1 stream group-threads=256"
        .parse()
        .unwrap();
    assert_eq!(plan(&p, &t, &one).unwrap().groups_per_row, 1);
    let wide = plan(&p, &t, &"W=2048 V=4 U=4 G=1 registers".parse().unwrap()).unwrap();
    assert!(wide.groups_per_row == 4 && !wide.schedule().split_groups);
    for shape in ["56x45000", "512x4096", "8x768", "4096x32000"] {
        let auto = plan(
            &typed(Operator::CrossEntropy, DType::F32, shape),
            &t,
            &automatic(),
        )
        .unwrap();
        assert!(
            !auto.schedule().split_groups,
            "{shape}: {}",
            auto.describe()
        );
    }
}

#[test]
fn a_cluster_of_two_rows_holds_the_same_slice_of_each() {
    // G=2 on a row spanning a cluster: every group takes the same
    // slice of two rows (so it reads each column slice once for both),
    // the per-row tree unchanged.
    let p = problem(Operator::Layernorm, "17x131072");
    let t = Target::h200();
    let req = |rows_per_group, threads| LayoutRequest {
        workers: 2048,
        pack: 4,
        rows_per_group,
        cluster_group_threads: threads,
        push_cluster_reduce: true,
        stage_columns: true,
        ..Default::default()
    };
    let one = plan(&p, &t, &req(1, 128)).unwrap();
    let two = plan(&p, &t, &req(2, 128)).unwrap();
    assert_eq!((one.groups_per_row, one.threads_per_group), (16, 128));
    assert_eq!((two.groups_per_row, two.threads_per_group), (16, 256));
    assert_eq!(two.tree, one.tree);
    assert_eq!(two.slot_bound, one.slot_bound);
    // 17 rows: 9 clusters of 16 groups, the last one's second row idle.
    assert_eq!(two.groups, 9 * 16);
    assert!(two.pushed_cluster_reduce);
    // The stage is per row's slice: not with two rows (refused quietly).
    assert!(one.staged_columns() && !two.staged_columns());
    // Each row has its warps' and its cluster's slots, then one
    // mbarrier per reduction (8-byte aligned).
    let r = two.analysis.reductions.len() as u32;
    assert_eq!(two.shared_bytes, 4 * r * 2 * (4 + 16) + 8 * r + 4);
    // At most 1024 threads a group: 8 rows of 256 do not fit.
    assert!(matches!(
        plan(&p, &t, &req(8, 256)),
        Err(Refusal::InvalidWidth(m)) if m.contains("group limit")
    ));
    // Its description and pinned request name the per-row group size,
    // so a replay plans the same kernel again.
    assert!(two.describe().contains("G=2") && two.describe().contains("group-threads=128"));
    let again = plan(&p, &t, &two.pinned_request(&LayoutRequest::default(), 0)).unwrap();
    assert_eq!(again.describe(), two.describe());
    assert_eq!(again.threads_per_group, 256);
    // The automatic mapping never asks for it.
    let auto = plan(&p, &t, &LayoutRequest::default()).unwrap();
    assert_eq!(auto.layout.rows_per_group, 1);
}

#[test]
fn an_occupancy_cap_holds_the_groups_and_refuses_what_it_cannot_hold() {
    let t = Target::h200();
    let req = |occupancy, occupancy_cap| LayoutRequest {
        workers: 256,
        pack: 4,
        occupancy,
        occupancy_cap,
        ..Default::default()
    };
    let p = problem(Operator::Rmsnorm, "4096x4096");
    let capped = plan(&p, &t, &req(0, 3)).unwrap();
    assert_eq!(capped.occupancy_cap.map(|c| c.groups), Some(3));
    assert_eq!(capped.groups_per_multiprocessor(&t, 32), 3);
    let free = plan(&p, &t, &req(0, 0)).unwrap();
    assert_eq!(free.groups_per_multiprocessor(&t, 32), 8);
    // The pinned request keeps the cap.
    let again = plan(&p, &t, &capped.pinned_request(&LayoutRequest::default(), 0)).unwrap();
    assert_eq!(again, capped);
    let refused = plan(&p, &t, &req(4, 3)).unwrap_err().to_string();
    assert!(refused.contains("above the cap"), "{refused}");
}

#[test]
fn explicit_packed_register_requests_are_budgeted_in_packed_words() {
    let t = Target::h200();
    let p = typed(Operator::Layernorm, DType::Bf16, "4096x32768");
    let req = |pack_resident| LayoutRequest {
        workers: 1024,
        pack: 8,
        unroll: 4,
        residency: ResidencyRequest::Registers,
        pack_resident,
        one_pass_moments: true,
        ..Default::default()
    };
    let packed = plan(&p, &t, &req(true)).unwrap();
    assert!(packed.packed_resident && packed.residency == Residency::Registers);
    assert!(packed.registers <= 64, "{}", packed.registers);
    let refused = plan(&p, &t, &req(false)).unwrap_err().to_string();
    assert!(
        refused.contains("private slots needs 32, limit 28"),
        "{refused}"
    );
    // The automatic mapping keeps the unpacked estimate.
    let auto = LayoutRequest {
        pack_resident: true,
        ..Default::default()
    };
    assert_ne!(plan(&p, &t, &auto).unwrap().layout.workers, 1024);
    // f32 has no packed words.
    let f32 = typed(Operator::Layernorm, DType::F32, "4096x32768");
    let f32_req = LayoutRequest {
        pack: 4,
        unroll: 8,
        ..req(true)
    };
    assert!(plan(&f32, &t, &f32_req).is_err());
}

/// Early columns apply to register plans of programs with columns and
/// vector packs, at most the row's full chunks, and never together
/// with ordered or hoisted columns, or on streamed plans.
#[test]
fn early_columns_are_clamped_to_the_chunks_and_marked_where_they_apply() {
    let target = Target::h200();
    let make = |op, shape: &str, edit: &dyn Fn(&mut LayoutRequest)| {
        let problem = Problem::operator(
            op,
            OperatorOptions::default(),
            DType::F32,
            shape.parse().unwrap(),
        );
        let mut request = LayoutRequest {
            workers: 256,
            pack: 4,
            unroll: 1,
            residency: ResidencyRequest::Registers,
            early_columns: 8,
            ..Default::default()
        };
        edit(&mut request);
        plan(&problem, &target, &request).unwrap()
    };
    // 4096 / (256 * 4) = 4 chunks: 8 asked, 4 given.
    let p = make(Operator::Layernorm, "4x4096", &|_| {});
    assert_eq!(p.early_columns, 4, "{}", p.describe());
    assert!(p.describe().contains("early-columns=4"));
    let p = make(Operator::Rmsnorm, "4x4096", &|r| r.early_columns = 1);
    assert_eq!(p.early_columns, 1);
    // No columns, streamed, ordered, hoisted, scalar packs: none.
    for p in [
        make(Operator::Softmax, "4x4096", &|_| {}),
        make(Operator::Layernorm, "4x4096", &|r| {
            r.residency = ResidencyRequest::Stream
        }),
        make(Operator::Layernorm, "4x4096", &|r| r.ordered_columns = true),
        make(Operator::Layernorm, "4x4096", &|r| r.hoist_columns = true),
        make(Operator::Layernorm, "4x4096", &|r| r.pack = 1),
    ] {
        assert_eq!(p.early_columns, 0, "{}", p.describe());
    }
    // The request a plan records asks for what the plan does.
    let p = make(Operator::Layernorm, "4x4096", &|r| r.early_columns = 2);
    assert_eq!(
        p.pinned_request(&LayoutRequest::default(), 0).early_columns,
        2
    );
}

/// Regression: the register fit ignored `shared-chunks=N`, so a
/// 1024-thread group in a cluster of four was refused an f32 row slice
/// of 64 slots even with 12 of its 16 chunks in shared memory.
#[test]
fn regression_shared_chunks_count_before_the_register_fit() {
    let target = Target::h200();
    let problem = typed(Operator::Layernorm, DType::F32, "1024x262144");
    let request = |shared_chunks| LayoutRequest {
        workers: 4096,
        pack: 4,
        unroll: 4,
        residency: ResidencyRequest::Registers,
        cluster_group_threads: 1024,
        shared_chunks,
        ..LayoutRequest::default()
    };
    let refused = plan(&problem, &target, &request(0))
        .unwrap_err()
        .to_string();
    assert!(refused.contains("private slots needs 64"), "{refused}");
    let p = plan(&problem, &target, &request(12)).unwrap();
    assert_eq!(p.residency, Residency::Registers, "{}", p.describe());
    assert_eq!(p.groups_per_row, 4, "{}", p.describe());
    assert_eq!(p.shared_chunks.map(|s| s.chunks), Some(12));
    // Four chunks of four slots stay in registers.
    assert_eq!(p.registers, overhead_registers(4, DType::F32) + 16);
}

#[test]
fn regression_rows_of_one_scalar_pack_per_worker_leave_addresses_unfolded() {
    // An opaque worker index cost 0.1 µs on 1x127 (residual_layernorm
    // bf16 1.34 -> 1.46 µs, behind torch.compile's
    // 1.35), where each worker has one scalar pack and nothing folds.
    let h200 = Target::h200();
    for op in Operator::SIX {
        for dtype in [DType::F32, DType::Bf16] {
            let tiny = plan(&typed(op, dtype, "1x127"), &h200, &automatic()).unwrap();
            assert!(!tiny.folded_pack_addresses, "{}", tiny.describe());
            assert!(tiny.describe().contains("unfolded-addresses"));
            // Several packs per worker, or one vector pack: folded.
            for shape in ["2048x257", "1x4096", "32768x4096"] {
                let p = plan(&typed(op, dtype, shape), &h200, &automatic()).unwrap();
                assert_eq!(
                    p.folded_pack_addresses,
                    p.residency == Residency::Registers || p.occupancy_cap.is_some(),
                    "{shape}: {}",
                    p.describe()
                );
                assert!(!p.describe().contains("unfolded-addresses"));
            }
        }
    }
    // Asked for explicitly, a register plan leaves them unfolded too.
    let asked = LayoutRequest {
        unfold_pack_addresses: true,
        ..automatic()
    };
    let p = plan(
        &typed(Operator::Rmsnorm, DType::F32, "64x4096"),
        &h200,
        &asked,
    )
    .unwrap();
    assert!(p.unfolded_pack_addresses(), "{}", p.describe());
    assert!(p.pinned_request(&automatic(), 0).unfold_pack_addresses);
}

#[test]
fn shared_memory_caps_the_groups_per_multiprocessor_of_a_staged_plan() {
    // layernorm f32 4096x131072 on 8 groups of 256 threads stages two
    // 64 KB slices: one group per SM, whatever the registers (measured
    // 1910 against 1404 µs unstaged).
    let t = Target::h200();
    let request = LayoutRequest {
        workers: 2048,
        pack: 4,
        cluster_group_threads: 256,
        stage_columns: true,
        ..Default::default()
    };
    let problem = |op| typed(op, DType::F32, "4096x131072");
    let ln = plan(&problem(Operator::Layernorm), &t, &request).unwrap();
    assert!(ln.staged_columns() && ln.shared_bytes > 128 * 1024);
    assert_eq!(groups_per_multiprocessor(&t, 256, 80, ln.shared_bytes), 1);
    assert_eq!(groups_per_multiprocessor(&t, 256, 80, 0), 3);
    // No occupancy promise can add a group that shared memory forbids.
    assert_eq!(occupancy_step_to_try(&t, 256, 104, ln.shared_bytes), None);
    assert_eq!(occupancy_step_to_try(&t, 256, 86, 0), Some(3));
    // rmsnorm's one 64 KB slice leaves room for three.
    let rms = plan(&problem(Operator::Rmsnorm), &t, &request).unwrap();
    assert_eq!(groups_per_multiprocessor(&t, 256, 80, rms.shared_bytes), 3);
    // With the promise of three groups, layernorm stages its first
    // column (the weight) only, so the three fit.
    let promised = LayoutRequest {
        occupancy: 3,
        ..request
    };
    let ln3 = plan(&problem(Operator::Layernorm), &t, &promised).unwrap();
    assert_eq!(ln3.column_stage.map(|s| s.columns), Some(1));
    assert!(
        ln3.describe().contains(" staged-columns=1"),
        "{}",
        ln3.describe()
    );
    assert_eq!(groups_per_multiprocessor(&t, 256, 80, ln3.shared_bytes), 3);
    // A promise no column fits beside stages nothing.
    let crowded = LayoutRequest {
        occupancy: 4,
        ..request
    };
    assert!(!plan(&problem(Operator::Layernorm), &t, &crowded)
        .unwrap()
        .staged_columns());
}

/// The register file is allocated per warp in steps of 256 registers, 8
/// per thread: 36 registers take 40, so 256-thread groups fit 6 to a
/// multiprocessor, not the 7 that 36 would give.
#[test]
fn occupancy_rounds_registers_up_to_the_allocation_step() {
    let t = Target::h200();
    assert_eq!(groups_per_multiprocessor(&t, 256, 36, 0), 6);
    assert_eq!(groups_per_multiprocessor(&t, 256, 40, 0), 6);
    assert_eq!(groups_per_multiprocessor(&t, 256, 32, 0), 8);
    assert_eq!(groups_per_multiprocessor(&t, 128, 33, 0), 12);
}

fn in_place_request(schedule: &str) -> LayoutRequest {
    let mut r: LayoutRequest = schedule.parse().unwrap();
    r.in_place = true;
    r
}

/// In place is refused, with its reason, wherever an element could be
/// read after its output is written: a pushed cluster reduction (no
/// ordering of one group's reads before another's stores), a cold path
/// (the norms' default: re-reads the row after its stores), two row outputs; and it is
/// planned for cross entropy with its gradient in every other family.
#[test]
fn in_place_is_refused_where_a_read_could_follow_the_store_over_it() {
    let t = Target::h200();
    let ce = typed(Operator::CrossEntropyWithGrad, DType::Bf16, "8x131072");
    let pushed = plan(
        &ce,
        &t,
        &in_place_request("W=2048 V=8 registers push-reduce"),
    );
    assert!(
        matches!(&pushed, Err(Refusal::InPlace(m)) if m.contains("push-reduce")),
        "{pushed:?}"
    );
    let barrier = plan(&ce, &t, &in_place_request("W=2048 V=8 registers")).unwrap();
    assert!(barrier.in_place && barrier.groups_per_row > 1);
    assert_eq!(barrier.in_place_pair(), Some(("x", "dx")));
    let cold = typed(Operator::Rmsnorm, DType::F32, "8x4096");
    let refused = plan(&cold, &t, &in_place_request("W=256 V=4"));
    assert!(
        matches!(&refused, Err(Refusal::InPlace(m)) if m.contains("cold path")),
        "{refused:?}"
    );
    let two = typed(Operator::ResidualLayernorm, DType::F32, "8x4096");
    let refused = plan(&two, &t, &in_place_request("W=256 V=4"));
    assert!(
        matches!(&refused, Err(Refusal::InPlace(m)) if m.contains("2 row outputs")),
        "{refused:?}"
    );
    // The one-pass moments read x's first element in the first phase,
    // before the output's: in place is legal there, without the cold path.
    let ln = typed(Operator::Layernorm, DType::F32, "8x4096");
    let plain = "W=256 V=4 one-pass-moments no-cold-path";
    assert!(plan(&ln, &t, &in_place_request(plain)).is_ok());
    // The plan round-trips its token.
    assert!(
        barrier.describe().ends_with("in-place"),
        "{}",
        barrier.describe()
    );
    assert_eq!(plan(&ce, &t, &barrier.schedule()).unwrap(), barrier);
}

/// A store in the phase that reads an element another thread owns (here
/// `x[0]` and the output in one phase, no reduction between) is refused.
#[test]
fn in_place_refuses_a_foreign_read_in_the_storing_phase() {
    let mut b = Builder::new("first_minus_x");
    let x = b.input("x", BufferKind::Row);
    let f = b.row_first("x");
    let fb = b.broadcast(f);
    let y = b.sub(x, fb);
    b.output("y", BufferKind::Row, y);
    let program = b.finish();
    let p = Problem {
        program,
        dtype: DType::F32,
        shape: "4x1024".parse().unwrap(),
    };
    let refused = plan(&p, &Target::h200(), &in_place_request("W=256 V=4"));
    assert!(
        matches!(&refused, Err(Refusal::InPlace(m)) if m.contains("first element")),
        "{refused:?}"
    );
}

/// An automatic in-place request never plans a pushed cluster
/// reduction, which legality would refuse (were one chosen, the choice
/// meets its cluster at a barrier instead), and otherwise plans what the
/// out-of-place request does.
#[test]
fn an_automatic_in_place_request_avoids_pushed_cluster_reductions() {
    let t = Target::h200();
    for shape in ["4096x128256", "64x262144", "8192x32000", "1x4096"] {
        for dtype in [DType::Bf16, DType::F32] {
            let ce = typed(Operator::CrossEntropyWithGrad, dtype, shape);
            let r = LayoutRequest {
                in_place: true,
                ..automatic()
            };
            let p = plan(&ce, &t, &r).unwrap_or_else(|e| panic!("{shape} {dtype}: {e}"));
            assert!(p.in_place && !p.pushed_cluster_reduce, "{}", p.describe());
            // Otherwise the out-of-place choice itself, the same kernel
            // but for the aliased pair.
            let out = plan(&ce, &t, &automatic()).unwrap();
            if !out.pushed_cluster_reduce {
                let mut same = out.schedule();
                same.in_place = true;
                assert_eq!(p.schedule(), same, "{shape} {dtype}");
            }
        }
    }
}

/// Aligned packs apply to misaligned rows of vector packs, one group per
/// row, norms (columns, cold path) too; elsewhere the token is dropped.
/// Their slots cover a row shifted by up to V - 1 elements. Columns are
/// then never hoisted: a hoisted weight tile would keep the first row's
/// shift for the next.
#[test]
fn aligned_packs_apply_where_each_row_can_shift_alone() {
    let t = Target::h200();
    let aligned = |op, dtype, shape: &str, r: LayoutRequest| {
        plan(
            &typed(op, dtype, shape),
            &t,
            &LayoutRequest {
                aligned_packs: true,
                ..r
            },
        )
        .unwrap()
    };
    let p = aligned(Operator::Softmax, DType::Bf16, "8x1001", req(128, 8));
    assert!(p.aligned_packs);
    assert!(p.describe().contains(" aligned-packs"), "{}", p.describe());
    // 1001 + 7 elements over chunks of 1024: one chunk of 8 slots.
    assert_eq!(p.slot_bound, 8);
    assert_eq!(p.row_shift(3), 3 * 1001 % 8);
    let norm = aligned(Operator::Layernorm, DType::Bf16, "8x1001", req(128, 8));
    assert!(
        norm.aligned_packs && norm.cold_path(),
        "{}",
        norm.describe()
    );
    let hoisting = LayoutRequest {
        hoist_columns: true,
        ..req(128, 8)
    };
    let rms = typed(Operator::Rmsnorm, DType::F32, "64x1001");
    assert!(plan(&rms, &t, &hoisting).unwrap().hoisted_columns);
    let norm = aligned(Operator::Rmsnorm, DType::F32, "64x1001", hoisting);
    assert!(
        norm.aligned_packs && !norm.hoisted_columns,
        "{}",
        norm.describe()
    );
    for (op, dtype, shape, r) in [
        (Operator::Softmax, DType::Bf16, "8x1024", req(128, 8)),
        (Operator::Softmax, DType::Bf16, "8x1001", req(128, 1)),
        (Operator::Rmsnorm, DType::Bf16, "8x1024", req(128, 8)),
    ] {
        let p = aligned(op, dtype, shape, r);
        assert!(!p.aligned_packs, "{op} {shape}: {}", p.describe());
        assert_eq!(p.row_shift(3), 0);
    }
    // A cluster's groups share the row's shift.
    let cluster = aligned(Operator::Softmax, DType::Bf16, "8x100001", req(4096, 8));
    assert!(
        cluster.aligned_packs && cluster.groups_per_row > 1,
        "{}",
        cluster.describe()
    );
    assert_eq!(cluster.row_shift(3), 3 * 100001 % 8);
}

/// A batch-invariant request cannot have aligned packs: they shift each
/// row's layout by its position in the batch.
#[test]
fn aligned_packs_are_refused_with_batch_invariance() {
    let t = Target::h200();
    let p = typed(Operator::Softmax, DType::Bf16, "8x4097");
    let both = LayoutRequest {
        aligned_packs: true,
        batch_invariant: true,
        ..req(128, 8)
    };
    let err = plan(&p, &t, &both).unwrap_err();
    assert!(matches!(err, Refusal::BatchVariant(_)), "{err}");
    // The automatic request leaves them out then, and takes them otherwise.
    let invariant = LayoutRequest {
        batch_invariant: true,
        ..automatic()
    };
    assert!(!plan(&p, &t, &invariant).unwrap().aligned_packs);
    assert!(plan(&p, &t, &automatic()).unwrap().aligned_packs);
}
