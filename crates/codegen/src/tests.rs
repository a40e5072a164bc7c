use super::*;
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, LayoutRequest, Problem, ResidencyRequest, Target};

fn make_with(op: Operator, dtype: DType, shape: &str, req: LayoutRequest) -> Plan {
    let problem = Problem::operator(
        op,
        OperatorOptions::default(),
        dtype,
        shape.parse().unwrap(),
    );
    plan(&problem, &Target::h200(), &req).unwrap_or_else(|e| panic!("{op} {shape}: {e}"))
}

fn make(op: Operator, dtype: DType, shape: &str, w: u32, v: u32, g: u32) -> Plan {
    make_with(
        op,
        dtype,
        shape,
        LayoutRequest {
            workers: w,
            pack: v,
            unroll: 1,
            rows_per_group: g,
            ..Default::default()
        },
    )
}

fn kernel(plan: &Plan) -> Kernel {
    generate(plan, &CodegenOptions::default()).unwrap()
}

/// The snapshot: launch geometry and parameters, then the source.
fn golden(plan: &Plan) -> String {
    let k = kernel(plan);
    let params: Vec<String> = k
        .params
        .iter()
        .map(|p| format!("{} {} ({:?})", p.c_type, p.name, p.kind))
        .collect();
    format!(
        "name: {}\ngrid: {:?}\nblock: {:?}\ncluster: {:?}\nshared_bytes: {}\nparams: {}\n\n{}",
        k.name,
        k.grid,
        k.block,
        k.cluster,
        k.shared_bytes,
        params.join(", "),
        k.source
    )
}

/// Streaming hints: the read-once row tile x loads evict-first, the
/// reused weight loads plainly, the row output stores evict-first.
#[test]
fn golden_rmsnorm_f32_w256_v4_streaming_hints() {
    let p = make_with(
        Operator::Rmsnorm,
        DType::F32,
        "64x4096",
        LayoutRequest {
            workers: 256,
            pack: 4,
            unroll: 1,
            streaming_hints: true,
            ..Default::default()
        },
    );
    let k = kernel(&p);
    assert_eq!(k.name, "lf_rmsnorm_f32_w256_v4_u1_g1_cs_cp");
    assert!(
        k.source.contains("= lf_ld_cs(q + 0);"),
        "x loads evict-first"
    );
    assert!(
        k.source.contains("const uint4 a = q[0];"),
        "the weight loads plainly"
    );
    assert!(k.source.contains("lf_st_cs(q + 0, a);"));
    insta::assert_snapshot!(golden(&p));
}

/// The occupancy promise: `__launch_bounds__(threads, groups)`, and a
/// name of its own; the body is the plain plan's.
#[test]
fn an_occupancy_promise_changes_only_the_declaration_and_the_name() {
    let request = LayoutRequest {
        workers: 2048,
        pack: 8,
        unroll: 4,
        cluster_group_threads: 256,
        // The plain kernel's name, which the promise extends.
        no_cold_path: true,
        ..Default::default()
    };
    let plain = make_with(Operator::Rmsnorm, DType::Bf16, "4x131072", request);
    let bounded = make_with(
        Operator::Rmsnorm,
        DType::Bf16,
        "4x131072",
        LayoutRequest {
            occupancy: 4,
            ..request
        },
    );
    assert_eq!(bounded.min_groups_per_multiprocessor, Some(4));
    let (k_plain, k_bounded) = (kernel(&plain), kernel(&bounded));
    assert!(k_plain.source.contains("__launch_bounds__(256) "));
    assert!(k_bounded.source.contains("__launch_bounds__(256, 4) "));
    assert_eq!(k_bounded.name, format!("{}_ob4", k_plain.name));
    let strip = |s: &str, name: &str, describe: &str| {
        s.replace(name, "NAME")
            .replace(&describe.replace(" no-cold-path", ""), "DESCRIBE")
            .replace("__launch_bounds__(256, 4)", "__launch_bounds__(256)")
    };
    assert_eq!(
        strip(&k_plain.source, &k_plain.name, &plain.describe()),
        strip(&k_bounded.source, &k_bounded.name, &bounded.describe())
    );
    // A promise the thread limit cannot keep is refused.
    let problem = Problem::operator(
        Operator::Rmsnorm,
        OperatorOptions::default(),
        DType::Bf16,
        "4x131072".parse().unwrap(),
    );
    let too_many = LayoutRequest {
        occupancy: 9,
        ..request
    };
    let err = plan(&problem, &Target::h200(), &too_many).unwrap_err();
    assert!(err.to_string().contains("occupancy 9"), "{err}");
}

/// Kept columns: in a register plan, weight and bias load evict-last and
/// nothing else changes (x, the stores, the arithmetic); an operator
/// without columns plans no policy at all.
#[test]
fn keep_columns_marks_only_the_column_loads_of_a_register_plan() {
    let request = LayoutRequest {
        workers: 256,
        pack: 4,
        no_cold_path: true,
        ..Default::default()
    };
    let kept_request = LayoutRequest {
        keep_columns: true,
        ..request
    };
    let plain = make_with(Operator::Layernorm, DType::F32, "64x4096", request);
    let kept = make_with(Operator::Layernorm, DType::F32, "64x4096", kept_request);
    assert!(kept.keep_columns && kept.describe().contains(" keep-columns"));
    assert_eq!(kept.residency, lanefold_plan::Residency::Registers);
    let (k_plain, k) = (kernel(&plain), kernel(&kept));
    assert_eq!(k.name, format!("{}_kc", k_plain.name));
    // Weight and bias each load through one kept 16-byte load (in the
    // output phase's chunk loop); x stays plain.
    let kept_loads = k.source.matches("lf_ld_keep(q + 0, lf_keep)").count();
    assert_eq!(kept_loads, 2, "{}", k.source);
    assert!(!k.source.contains("lf_ld_drop(q"));
    let strip = |s: &str, name: &str, describe: &str| {
        s.replace(name, "NAME")
            .replace(describe, "DESCRIBE")
            .replace("lf_ld_keep(q + 0, lf_keep)", "q[0]")
            .lines()
            .filter(|l| !l.contains("lf_keep") && !l.contains("lf_drop"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let body = |s: &str| s[s.find("#define LF_N").unwrap()..].to_string();
    assert_eq!(
        strip(&body(&k_plain.source), &k_plain.name, &plain.describe()),
        strip(&body(&k.source), &k.name, &kept.describe())
    );
    let softmax = make_with(Operator::Softmax, DType::F32, "64x4096", kept_request);
    assert!(!softmax.keep_columns);
    assert!(!kernel(&softmax).source.contains("lf_keep"));
}

/// Re-read hints: in a streamed plan, x's first load keeps it in L2 and
/// its last re-read lets it go; loads of tiles read once, columns and
/// stores stay plain; a register plan has nothing to hint.
#[test]
fn reread_hints_keep_a_streamed_tile_for_its_reread_and_drop_it_after() {
    let request = LayoutRequest {
        workers: 1024,
        pack: 4,
        unroll: 2,
        residency: ResidencyRequest::Stream,
        no_cold_path: true,
        ..Default::default()
    };
    let hinted_request = LayoutRequest {
        reread_hints: true,
        ..request
    };
    let plain = make_with(Operator::Rmsnorm, DType::F32, "4x32768", request);
    let hinted = make_with(Operator::Rmsnorm, DType::F32, "4x32768", hinted_request);
    assert!(hinted.reread_hints && hinted.describe().contains(" reread-hints"));
    let (k_plain, k) = (kernel(&plain), kernel(&hinted));
    assert_eq!(k.name, format!("{}_rr", k_plain.name));
    let phase1 = k.source.find("// ---- phase 1 ----").unwrap();
    let (p0, p1) = k.source.split_at(phase1);
    assert!(
        p0.contains("const uint4 a = lf_ld_keep(q + 0, lf_keep);"),
        "{p0}"
    );
    assert!(!p0.contains("lf_ld_drop(q"));
    assert!(
        p1.contains("const uint4 a = lf_ld_drop(q + 0, lf_drop);"),
        "{p1}"
    );
    // The weight (a column, read by every row) is kept as well.
    assert_eq!(p1.matches("lf_ld_keep(q + 0, lf_keep)").count(), 1, "{p1}");
    assert!(!p1.contains("const uint4 a = q[0];"), "{p1}");
    // Only loads, helpers, policies and the name change.
    let strip = |s: &str, name: &str, describe: &str| {
        s.replace(name, "NAME")
            .replace(describe, "DESCRIBE")
            .replace("lf_ld_keep(q + 0, lf_keep)", "q[0]")
            .replace("lf_ld_drop(q + 0, lf_drop)", "q[0]")
            .lines()
            .filter(|l| !l.contains("lf_keep") && !l.contains("lf_drop"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let body = |s: &str| s[s.find("#define LF_N").unwrap()..].to_string();
    assert_eq!(
        strip(&body(&k_plain.source), &k_plain.name, &plain.describe()),
        strip(&body(&k.source), &k.name, &hinted.describe())
    );
    // A register plan re-reads nothing: the request changes nothing.
    let registers = make_with(
        Operator::Rmsnorm,
        DType::F32,
        "64x4096",
        LayoutRequest {
            workers: 256,
            pack: 4,
            reread_hints: true,
            ..Default::default()
        },
    );
    assert!(!registers.reread_hints);
    assert!(!kernel(&registers).source.contains("lf_ld_keep"));
}

/// A cluster of eight 256-thread groups: 8 warps per group, an 8-way
/// cluster level, launch geometry to match.
#[test]
fn golden_softmax_bf16_w2048_v8_cluster_of_256_thread_groups() {
    let p = make_with(
        Operator::Softmax,
        DType::Bf16,
        "2x131072",
        LayoutRequest {
            workers: 2048,
            pack: 8,
            unroll: 1,
            cluster_group_threads: 256,
            ..Default::default()
        },
    );
    let k = kernel(&p);
    assert_eq!(k.cluster, Some(8));
    assert_eq!(k.block, (256, 1, 1));
    assert_eq!(k.grid, (2 * 8, 1, 1));
    insta::assert_snapshot!(golden(&p));
}

/// Part of the columns staged: the weight comes from shared memory, the
/// bias still from global memory, and the wait precedes the weight's phase.
#[test]
fn a_partial_column_stage_reads_only_the_staged_columns_from_shared_memory() {
    let p = make_with(
        Operator::Layernorm,
        DType::F32,
        "2x131072",
        LayoutRequest {
            workers: 2048,
            pack: 4,
            cluster_group_threads: 256,
            stage_columns: true,
            occupancy: 3,
            ..Default::default()
        },
    );
    assert_eq!(p.column_stage.map(|s| s.columns), Some(1));
    let k = kernel(&p);
    assert!(k.name.contains("_sc1"), "{}", k.name);
    assert!(k.source.contains("lf_stage_weight"));
    assert!(!k.source.contains("lf_stage_bias"));
    assert!(k
        .source
        .contains("reinterpret_cast<const uint4*>(p_bias + i0)"));
    assert_eq!(k.source.matches("cp.async.wait_all").count(), 1);
}

/// The relaxed exit: the barrier before exit arrives without a release;
/// the reduction barriers keep theirs. Without a cluster, no barrier.
#[test]
fn relaxed_cluster_exit_changes_only_the_barrier_before_exit() {
    let make = |shape: &str, workers, relaxed_cluster_exit| {
        make_with(
            Operator::Rmsnorm,
            DType::F32,
            shape,
            LayoutRequest {
                workers,
                pack: 4,
                cluster_group_threads: 256,
                relaxed_cluster_exit,
                no_cold_path: true,
                ..Default::default()
            },
        )
    };
    let relaxed = make("2x131072", 2048, true);
    assert!(relaxed.relaxed_cluster_exit && relaxed.describe().contains(" relaxed-exit"));
    let (k, plain) = (kernel(&relaxed), kernel(&make("2x131072", 2048, false)));
    assert!(k.name.ends_with("_rx"), "{}", k.name);
    let calls = |src: &str, f: &str| src.matches(&format!("    {f}();")).count();
    assert_eq!(calls(&k.source, "lf_cluster_exit"), 1);
    assert_eq!(calls(&plain.source, "lf_cluster_exit"), 0);
    assert_eq!(
        calls(&k.source, "lf_cluster_sync") + 1,
        calls(&plain.source, "lf_cluster_sync")
    );
    // One group per row: nothing to relax.
    assert!(!make("2x4096", 256, true).relaxed_cluster_exit);
}

/// The pushed cluster reduction: mbarriers initialised and published by
/// one relaxed cluster barrier (arrive before the row loads, wait before
/// the first push), each reduction's partials pushed by `st.async` into
/// every group and combined from local slots; no release barrier left.
#[test]
fn golden_softmax_f32_w2048_v4_pushed_cluster_reduce() {
    let p = make_with(
        Operator::Softmax,
        DType::F32,
        "2x131072",
        LayoutRequest {
            workers: 2048,
            pack: 4,
            unroll: 1,
            cluster_group_threads: 256,
            push_cluster_reduce: true,
            ..Default::default()
        },
    );
    assert!(p.pushed_cluster_reduce && p.describe().contains(" push-reduce"));
    let k = kernel(&p);
    assert!(k.name.ends_with("_pr"), "{}", k.name);
    let body = &k.source[k.source.find("__global__").unwrap()..];
    assert!(!body.contains("lf_cluster_sync();"));
    assert!(!body.contains("lf_cluster_load("));
    // Two reductions (max, sum): two pushes, two waits, one barrier each.
    assert_eq!(body.matches("lf_push(&lf_smem[").count(), 2);
    assert_eq!(body.matches("lf_push_wait(").count(), 2);
    assert_eq!(body.matches("barrier.cluster.wait.aligned").count(), 1);
    assert_eq!(body.matches("lf_cluster_exit();").count(), 1);
    // The kernel's shared memory holds the slots and 8-aligned barriers,
    // within what the plan reserved.
    assert!(
        k.shared_bytes <= p.shared_bytes,
        "{} > {}",
        k.shared_bytes,
        p.shared_bytes
    );
    insta::assert_snapshot!(golden(&p));
}

/// Two rows per cluster (G=2 on a row spanning a cluster): thread t of a
/// group serves row t / 128 at worker rank * 128 + t % 128; each row's
/// first 16 threads push that row's partials into its own 16 slots of
/// every group, and every mbarrier expects both rows' partials.
#[test]
fn golden_rmsnorm_f32_w2048_v4_two_rows_per_cluster_pushed() {
    let p = make_with(
        Operator::Rmsnorm,
        DType::F32,
        "3x131072",
        LayoutRequest {
            workers: 2048,
            pack: 4,
            unroll: 1,
            rows_per_group: 2,
            cluster_group_threads: 128,
            push_cluster_reduce: true,
            ..Default::default()
        },
    );
    assert_eq!(
        (p.groups_per_row, p.threads_per_group, p.groups),
        (16, 256, 32)
    );
    let k = kernel(&p);
    assert_eq!(k.block, (256, 1, 1));
    assert_eq!(k.grid, (32, 1, 1));
    assert_eq!(k.cluster, Some(16));
    let body = &k.source[k.source.find("__global__").unwrap()..];
    assert!(body.contains("const int row_in_group = tid >> 7;"));
    assert!(body.contains("const int row = blockIdx.x / 16 * 2 + row_in_group;"));
    assert!(body.contains("if (tid % 128 < 16) {"));
    assert!(body.contains("+ row_in_group * 16 + rank], "));
    assert!(body.contains("expect_tx.shared::cta.b64 _, [%0], 128;"));
    assert!(k.shared_bytes <= p.shared_bytes);
    insta::assert_snapshot!(golden(&p));
}

/// The same two rows per cluster through the barrier form: each row's
/// first thread writes that row's slot, and every lane reads its group's
/// slot of its own row.
#[test]
fn two_rows_per_cluster_pull_their_own_rows_slots() {
    let p = make_with(
        Operator::Softmax,
        DType::Bf16,
        "3x131072",
        LayoutRequest {
            workers: 2048,
            pack: 8,
            rows_per_group: 2,
            cluster_group_threads: 256,
            ..Default::default()
        },
    );
    let k = kernel(&p);
    let body = &k.source[k.source.find("__global__").unwrap()..];
    // Two reductions (max, sum), two rows each: slots base + 2k + row.
    assert!(body.contains("if (tid % 256 == 0) lf_smem[32 + row_in_group] = a0;"));
    assert!(body.contains("lf_cluster_load(&lf_smem[34 + row_in_group], lane)"));
    assert!(k.shared_bytes <= p.shared_bytes);
}

/// Every operator's pushed kernel fits the shared memory its plan
/// reserved, with and without staged columns and the online normalizer.
#[test]
fn pushed_reductions_fit_the_shared_memory_their_plans_reserve() {
    for op in Operator::SIX {
        for (dtype, pack) in [(DType::F32, 4), (DType::Bf16, 8)] {
            for (stage_columns, online_normalizer, persistent_clusters) in [
                (false, false, false),
                (true, false, false),
                (false, true, false),
                (true, false, true),
                (false, true, true),
            ] {
                let p = make_with(
                    op,
                    dtype,
                    "3x131072",
                    LayoutRequest {
                        workers: 4096,
                        pack,
                        cluster_group_threads: 256,
                        stage_columns,
                        online_normalizer,
                        push_cluster_reduce: true,
                        persistent_clusters,
                        ..Default::default()
                    },
                );
                assert!(p.pushed_cluster_reduce, "{}", p.describe());
                assert_eq!(p.persistent_clusters, persistent_clusters);
                let k = kernel(&p);
                assert!(
                    k.shared_bytes <= p.shared_bytes,
                    "{op} {dtype}: {} > {}",
                    k.shared_bytes,
                    p.shared_bytes
                );
            }
        }
    }
}

/// Packed resident tile: the row's loaded bf16 words are its slots, two
/// values per register; each later phase hides them from the compiler
/// (an empty volatile asm) and widens them again, so no f32 value computed
/// in an earlier phase is kept alive in their place.
#[test]
fn golden_layernorm_bf16_w256_v8_packed_resident() {
    let p = make_with(
        Operator::Layernorm,
        DType::Bf16,
        "3x4096",
        LayoutRequest {
            workers: 256,
            pack: 8,
            unroll: 1,
            pack_resident: true,
            ..Default::default()
        },
    );
    assert!(p.packed_resident && p.describe().contains(" packed-resident"));
    let k = kernel(&p);
    assert!(k.name.ends_with("_pk_cp"), "{}", k.name);
    assert!(k.source.contains("unsigned r0[8];"));
    assert!(!k.source.contains("float r0["));
    // Phases 1 (variance) and 2 (normalize) re-read the tile.
    assert_eq!(
        k.source
            .matches("asm volatile(\"\" : \"+r\"(r0[k]));")
            .count(),
        2
    );
    insta::assert_snapshot!(golden(&p));
}

/// Packing applies to 16-bit register plans of vector packs only, and
/// beside a partial chunk only where registers are asked for explicitly.
#[test]
fn packed_resident_is_left_out_of_f32_streamed_and_partial_pack_plans() {
    let packed = |dtype, shape: &str, residency| {
        make_with(
            Operator::Softmax,
            dtype,
            shape,
            LayoutRequest {
                workers: 256,
                pack: 8,
                residency,
                pack_resident: true,
                ..Default::default()
            },
        )
        .packed_resident
    };
    use lanefold_plan::ResidencyRequest::{Auto, Registers, Stream};
    assert!(packed(DType::Bf16, "2x4096", Registers));
    assert!(packed(DType::F16, "2x4096", Registers));
    assert!(!packed(DType::F32, "2x4096", Registers));
    assert!(!packed(DType::Bf16, "2x4096", Stream));
    assert!(packed(DType::Bf16, "2x4000", Registers));
    assert!(!packed(DType::Bf16, "2x4000", Auto));
    assert!(!packed(DType::Bf16, "2x4004", Registers));
}

/// Staged columns: each group of a cluster starts copying its weight and
/// bias slices into shared memory (after the slots, 16-byte aligned) with
/// `cp.async` before it loads the row, and waits for them only in the
/// normalize phase, which reads the stage, never global memory, for them.
#[test]
fn golden_layernorm_bf16_w2048_v4_staged_columns() {
    let p = make_with(
        Operator::Layernorm,
        DType::Bf16,
        "3x16384",
        LayoutRequest {
            workers: 2048,
            pack: 4,
            unroll: 2,
            cluster_group_threads: 256,
            stage_columns: true,
            ..Default::default()
        },
    );
    assert!(p.staged_columns(), "{}", p.describe());
    let k = kernel(&p);
    assert_eq!(k.grid, (3 * 8, 1, 1));
    // Two reductions x (8 warps + 8 cluster slots): 128 bytes of slots,
    // then two slices of 16384 / 8 bf16 elements.
    let stage = p.column_stage.unwrap();
    assert_eq!((stage.offset_floats, stage.slice_bytes), (32, 4096));
    assert_eq!(k.shared_bytes, 128 + 2 * 4096);
    assert!(!k.source.contains("p_weight + i0") && !k.source.contains("p_bias + i0"));
    assert_eq!(
        k.source.matches("p_weight + (c * LF_W + w) * LF_V").count(),
        1
    );
    insta::assert_snapshot!(golden(&p));
}

/// Staging applies only to cluster register plans: a one-group register
/// plan and a streamed cluster plan keep their global column loads, and a
/// program without columns is left as it was.
#[test]
fn staged_columns_apply_only_to_cluster_register_plans_with_columns() {
    let staged = |op, shape: &str, workers, residency| {
        make_with(
            op,
            DType::F32,
            shape,
            LayoutRequest {
                workers,
                pack: 4,
                residency,
                cluster_group_threads: 256,
                stage_columns: true,
                ..Default::default()
            },
        )
        .staged_columns()
    };
    use lanefold_plan::ResidencyRequest::{Auto, Stream};
    assert!(staged(Operator::Rmsnorm, "4x16384", 2048, Auto));
    assert!(!staged(Operator::Rmsnorm, "4x4096", 256, Auto));
    assert!(!staged(Operator::Rmsnorm, "4x16384", 2048, Stream));
    assert!(!staged(Operator::Softmax, "4x16384", 2048, Auto));
    // Two f32 slices of 262144 / 8 elements (256 KB) exceed a group's
    // 227 KB of shared memory: the first (the weight) is staged alone.
    assert!(staged(Operator::Rmsnorm, "4x262144", 2048, Auto));
    let layernorm = make_with(
        Operator::Layernorm,
        DType::F32,
        "4x262144",
        LayoutRequest {
            workers: 2048,
            pack: 4,
            cluster_group_threads: 256,
            stage_columns: true,
            ..Default::default()
        },
    );
    assert_eq!(layernorm.column_stage.map(|s| s.columns), Some(1));
}

/// Hoisted columns: layernorm's weight and bias load in phase 0 beside x
/// and live in private slots; the normalize phase reads the slots.
#[test]
fn golden_layernorm_f32_w256_v4_hoisted_columns() {
    let p = make_with(
        Operator::Layernorm,
        DType::F32,
        "64x4096",
        LayoutRequest {
            workers: 256,
            pack: 4,
            unroll: 1,
            hoist_columns: true,
            ..Default::default()
        },
    );
    assert!(p.hoisted_columns);
    let k = kernel(&p);
    assert_eq!(k.name, "lf_layernorm_f32_w256_v4_u1_g1_hc_cp");
    let phase0 = k.source.split("// ---- phase 1 ----").next().unwrap();
    assert!(
        phase0.contains("p_weight + i0") && phase0.contains("p_bias + i0"),
        "{phase0}"
    );
    let later = &k.source[phase0.len()..];
    assert!(!later.contains("p_weight + i0") && !later.contains("p_bias + i0"));
    insta::assert_snapshot!(golden(&p));
}

/// Hoisting never turns a register plan into a streamed one: where the
/// column slots do not fit it is simply not applied.
#[test]
fn hoisting_columns_that_do_not_fit_leaves_the_plan_as_it_was() {
    let req = |hoist_columns| LayoutRequest {
        workers: 256,
        pack: 4,
        hoist_columns,
        ..Default::default()
    };
    let plain = make_with(Operator::Layernorm, DType::F32, "4x49152", req(false));
    let asked = make_with(Operator::Layernorm, DType::F32, "4x49152", req(true));
    assert_eq!(plain.residency, asked.residency);
    assert!(!asked.hoisted_columns, "{}", asked.describe());
    assert_eq!(kernel(&plain).source, kernel(&asked).source);
}

/// A streamed plan re-reads its row tiles: their first read must stay in
/// L2, so only the output store carries the hint.
#[test]
fn streaming_hints_spare_tiles_a_streamed_plan_reads_again() {
    let p = make_with(
        Operator::Softmax,
        DType::F32,
        "4x8192",
        LayoutRequest {
            workers: 32,
            pack: 4,
            residency: lanefold_plan::ResidencyRequest::Stream,
            streaming_hints: true,
            ..Default::default()
        },
    );
    assert!(p.rereads_tiles());
    let src = kernel(&p).source;
    assert!(!src.contains("= lf_ld_cs("), "{src}");
    assert!(src.contains("lf_st_cs(q + 0, a);"), "{src}");
    // Without the flag no helper is even defined.
    let plain = make_with(
        Operator::Softmax,
        DType::F32,
        "4x8192",
        LayoutRequest {
            workers: 32,
            pack: 4,
            ..Default::default()
        },
    );
    assert!(!kernel(&plain).source.contains("lf_ld_cs"));
}

/// The model mapping's automatic U: a streamed loop unrolled so each
/// worker has 64 bytes of loads in flight (U=4 at V=4 f32).
#[test]
fn golden_sum_f32_w128_v4_auto_unroll() {
    let p = make_with(
        Operator::Sum,
        DType::F32,
        "1024x4096",
        LayoutRequest {
            workers: 128,
            pack: 4,
            ..Default::default()
        },
    );
    assert_eq!(p.layout.unroll, 4);
    let g = golden(&p);
    assert!(g.contains("#pragma unroll 4"), "{g}");
    insta::assert_snapshot!(g);
}

#[test]
fn golden_sum_f32_w32_v1() {
    insta::assert_snapshot!(golden(&make(
        Operator::Sum,
        DType::F32,
        "64x4096",
        32,
        1,
        1
    )));
}

#[test]
fn golden_softmax_f32_w256_v4() {
    insta::assert_snapshot!(golden(&make(
        Operator::Softmax,
        DType::F32,
        "64x4096",
        256,
        4,
        1
    )));
}

#[test]
fn golden_rmsnorm_bf16_w128_v8_g2() {
    insta::assert_snapshot!(golden(&make(
        Operator::Rmsnorm,
        DType::Bf16,
        "33x4096",
        128,
        8,
        2
    )));
}

#[test]
fn golden_layernorm_f32_stream() {
    let p = make_with(
        Operator::Layernorm,
        DType::F32,
        "64x4100",
        LayoutRequest {
            workers: 256,
            pack: 4,
            unroll: 2,
            residency: ResidencyRequest::Stream,
            ..Default::default()
        },
    );
    assert_eq!(p.residency, lanefold_plan::Residency::Stream);
    insta::assert_snapshot!(golden(&p));
}

/// Regression: streamed plans fully unrolled every chunk loop of a phase
/// that re-reads a tile, so a 1024-thread rmsnorm over 131072-wide rows
/// (32 chunks per worker) hoisted all 32 loads and spilled 760 bytes per
/// thread to local memory on the H200; its loops must unroll U times.
#[test]
fn streamed_plan_loops_unroll_u_times_not_fully() {
    let p = make_with(
        Operator::Rmsnorm,
        DType::F32,
        "8x131072",
        LayoutRequest {
            workers: 1024,
            pack: 4,
            unroll: 2,
            residency: ResidencyRequest::Stream,
            ..Default::default()
        },
    );
    assert_eq!(p.residency, lanefold_plan::Residency::Stream);
    let g = golden(&p);
    let lines: Vec<&str> = g.lines().map(str::trim).collect();
    let chunk_loops: Vec<&str> = (1..lines.len())
        .filter(|&i| lines[i].starts_with("for (int c = 0; c < LF_FULL"))
        .map(|i| lines[i - 1])
        .collect();
    assert_eq!(chunk_loops, ["#pragma unroll 2"; 2], "{g}");
}

#[test]
fn golden_cross_entropy_bf16() {
    insta::assert_snapshot!(golden(&make(
        Operator::CrossEntropy,
        DType::Bf16,
        "64x1003",
        128,
        2,
        1
    )));
}

#[test]
fn golden_residual_layernorm_f16() {
    insta::assert_snapshot!(golden(&make(
        Operator::ResidualLayernorm,
        DType::F16,
        "16x4096",
        512,
        8,
        1
    )));
}

#[test]
fn golden_softmax_cluster() {
    // The seed's automatic mapping (V=1): a cluster of groups per row.
    let req = LayoutRequest {
        mapper: lanefold_plan::MapperPolicy::Seed,
        ..Default::default()
    };
    let p = make_with(Operator::Softmax, DType::F32, "1x262144", req);
    assert!(p.groups_per_row > 1, "{}", p.describe());
    insta::assert_snapshot!(golden(&p));
}

#[test]
fn vector_loads_only_when_every_row_start_is_aligned() {
    // n % V == 0: 16-byte loads and stores.
    let s = kernel(&make(Operator::Softmax, DType::F32, "8x4096", 256, 4, 1)).source;
    assert!(s.contains("reinterpret_cast<const uint4*>"), "{s}");
    assert!(s.contains("reinterpret_cast<uint4*>"), "{s}");
    // n % V != 0: rows start misaligned, so scalar loads only.
    let s = kernel(&make(Operator::Softmax, DType::F32, "8x4097", 256, 4, 1)).source;
    assert!(!s.contains("reinterpret_cast"), "{s}");
    // bf16 V=8 is 16 bytes, V=4 is 8 bytes, V=2 is 4 bytes, V=1 scalar.
    for (v, ty) in [(8, "uint4"), (4, "uint2"), (2, "unsigned")] {
        let s = kernel(&make(Operator::Sum, DType::Bf16, "8x4096", 128, v, 1)).source;
        assert!(
            s.contains(&format!("reinterpret_cast<const {ty}*>")),
            "V={v}: {s}"
        );
    }
    let s = kernel(&make(Operator::Sum, DType::Bf16, "8x4096", 128, 1, 1)).source;
    assert!(!s.contains("reinterpret_cast"), "{s}");
    // f32 V=8 is two 16-byte accesses.
    let s = kernel(&make(Operator::Sum, DType::F32, "8x4096", 128, 8, 1)).source;
    assert!(s.contains("q[1]"), "{s}");
}

#[test]
fn partial_pack_is_guarded_and_complete_packs_are_not() {
    let s = kernel(&make(Operator::Sum, DType::F32, "4x1001", 64, 4, 1)).source;
    assert_eq!(s.matches("if (i0 + e < LF_N)").count(), 1, "{s}");
    let s = kernel(&make(Operator::Sum, DType::F32, "4x1024", 64, 4, 1)).source;
    assert!(!s.contains("i0 + e < LF_N"), "{s}");
}

#[test]
fn fmad_flag_follows_the_fma_option() {
    let off = nvrtc_options(&CodegenOptions { fma: false }, "sm_90");
    assert!(off.contains(&"--fmad=false".to_string()), "{off:?}");
    assert!(
        off.contains(&"--gpu-architecture=sm_90".to_string()),
        "{off:?}"
    );
    let on = nvrtc_options(&CodegenOptions::default(), "sm_90");
    assert!(on.contains(&"--fmad=true".to_string()), "{on:?}");
    assert_eq!(arch_for(9, 0), "sm_90");
}

#[test]
fn params_are_inputs_then_outputs_then_rows_and_n() {
    let k = kernel(&make(
        Operator::ResidualLayernorm,
        DType::F16,
        "4x256",
        64,
        4,
        1,
    ));
    let names: Vec<&str> = k.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["x", "residual", "weight", "bias", "h", "y", "rows", "n"]
    );
    let ce = kernel(&make(
        Operator::CrossEntropy,
        DType::Bf16,
        "4x256",
        64,
        4,
        1,
    ));
    assert_eq!(ce.params[1].c_type, "const long long*");
    assert_eq!(ce.params[2].kind, ParamKind::Output);
}

#[test]
fn register_residency_uses_private_slots_and_stream_rereads() {
    let reg = make(Operator::Softmax, DType::F32, "4x4096", 256, 4, 1);
    let s = kernel(&reg).source;
    assert!(s.contains(&format!("float r0[{}];", reg.slot_bound)), "{s}");
    // Register residency reads global memory once; streaming once per phase.
    assert_eq!(
        s.matches("reinterpret_cast<const uint4*>(p_x").count(),
        1,
        "{s}"
    );
    let stream = make_with(
        Operator::Softmax,
        DType::F32,
        "4x4096",
        LayoutRequest {
            workers: 256,
            pack: 4,
            residency: ResidencyRequest::Stream,
            ..Default::default()
        },
    );
    let s = kernel(&stream).source;
    assert!(!s.contains("float r0["), "{s}");
    assert_eq!(
        s.matches("reinterpret_cast<const uint4*>(p_x").count(),
        3,
        "{s}"
    );
}

#[test]
fn launch_geometry_follows_the_plan() {
    let p = make(Operator::Rmsnorm, DType::Bf16, "33x4096", 128, 8, 2);
    let k = kernel(&p);
    assert_eq!(k.grid, (17, 1, 1));
    assert_eq!(k.block, (256, 1, 1));
    assert_eq!(k.cluster, None);
    // One reduction, 2 rows x 4 warps.
    assert_eq!(k.shared_bytes, 4 * 2 * 4);
    let c = make(Operator::Softmax, DType::F32, "3x262144", 8192, 4, 1);
    let k = kernel(&c);
    assert_eq!(k.cluster, Some(16));
    assert_eq!(k.grid, (3 * 16, 1, 1));
    assert_eq!(k.block, (512, 1, 1));
    assert!(k.source.contains("lf_cluster_sync(); // no group leaves"));
    // Narrow rows: each row's lanes are one segment of the warp.
    let n = kernel(&make(Operator::Sum, DType::F32, "10x100", 8, 1, 4)).source;
    assert!(n.contains("lf_mask = 0xffu << (lane & ~7)"), "{n}");
    assert!(!n.contains("__syncthreads"), "{n}");
}

#[test]
fn generation_is_deterministic_and_names_are_identifiers() {
    let p = make(Operator::Softmax, DType::F32, "64x4096", 256, 4, 1);
    assert_eq!(kernel(&p), kernel(&p));
    assert_eq!(kernel(&p).name, "lf_softmax_f32_w256_v4_u1_g1");
}

fn custom(program: lanefold_ir::Program) -> Plan {
    let problem = Problem {
        program,
        dtype: DType::F32,
        shape: "8x256".parse().unwrap(),
    };
    let req = LayoutRequest {
        workers: 32,
        pack: 4,
        ..Default::default()
    };
    plan(&problem, &Target::h200(), &req).unwrap()
}

#[test]
fn cross_entropy_target_logit_is_gathered_not_masked_per_element() {
    let src = kernel(&make(
        Operator::CrossEntropy,
        DType::F32,
        "64x4096",
        128,
        4,
        1,
    ))
    .source;
    assert!(src.contains("lf_widen(p_x[row_off + x1])"), "{src}");
    assert!(!src.contains("(long long)(i0 + e)"), "{src}");
    // Only the max and the sum of exponentials go through the tree.
    assert_eq!(
        src.matches("__shfl_xor_sync(lf_mask").count(),
        2 * 5,
        "{src}"
    );
}

#[test]
fn masked_sum_of_a_computed_tile_keeps_the_per_element_select() {
    use lanefold_ir::{BufferKind, Builder, ReduceOp, UnaryOp};
    let mut b = Builder::new("masked_square");
    let x = b.input("x", BufferKind::Row);
    let i = b.input("target", BufferKind::RowIndex);
    let sq = b.unary(UnaryOp::Square, x);
    let m = b.mask_index(sq, i);
    let s = b.reduce(ReduceOp::Sum, m);
    b.output("y", BufferKind::RowScalar, s);
    let src = kernel(&custom(b.finish())).source;
    assert!(src.contains("(long long)(i0 + e) == x1"), "{src}");
    assert!(!src.contains("gathered"), "{src}");
}

#[test]
fn masked_tile_with_another_user_is_still_computed() {
    use lanefold_ir::{BufferKind, Builder, ReduceOp};
    let mut b = Builder::new("masked_both");
    let x = b.input("x", BufferKind::Row);
    let i = b.input("target", BufferKind::RowIndex);
    let m = b.mask_index(x, i);
    let s = b.reduce(ReduceOp::Sum, m);
    b.output("picked", BufferKind::RowScalar, s);
    b.output("masked", BufferKind::Row, m);
    let src = kernel(&custom(b.finish())).source;
    assert!(src.contains("gathered masked sum"), "{src}");
    assert!(src.contains("(long long)(i0 + e) == x1"), "{src}");
}

fn online(
    op: Operator,
    dtype: DType,
    shape: &str,
    w: u32,
    v: u32,
    g: u32,
    group_threads: u32,
) -> Plan {
    let p = make_with(
        op,
        dtype,
        shape,
        LayoutRequest {
            workers: w,
            pack: v,
            unroll: 1,
            rows_per_group: g,
            cluster_group_threads: group_threads,
            online_normalizer: true,
            ..Default::default()
        },
    );
    assert!(p.online_normalizer(), "{}", p.describe());
    p
}

/// The online normalizer: max and sum of exp accumulated in one pass (the
/// sum rescaled when the maximum grows), one tree over (max, sum) pairs at
/// the lane and warp levels, softmax's output in the next phase.
#[test]
fn golden_softmax_f32_w256_v4_online_normalizer() {
    let p = online(Operator::Softmax, DType::F32, "64x4096", 256, 4, 1, 0);
    assert_eq!(
        p.analysis.num_phases, 2,
        "one tree fewer than softmax's three phases"
    );
    insta::assert_snapshot!(golden(&p));
}

/// The pairs cross the cluster's groups through distributed shared memory.
#[test]
fn golden_softmax_bf16_cluster_online_normalizer() {
    let p = online(Operator::Softmax, DType::Bf16, "2x131072", 2048, 8, 1, 256);
    assert!(p.groups_per_row > 1, "{}", p.describe());
    insta::assert_snapshot!(golden(&p));
}

/// layernorm's moments in one pass about the row's first element: both
/// sums in one tree, the output in the second phase.
#[test]
fn golden_layernorm_f32_w256_v4_one_pass_moments() {
    let p = make_with(
        Operator::Layernorm,
        DType::F32,
        "64x4096",
        LayoutRequest {
            workers: 256,
            pack: 4,
            unroll: 1,
            one_pass_moments: true,
            ..Default::default()
        },
    );
    assert!(p.one_pass_moments(), "{}", p.describe());
    assert_eq!(p.analysis.num_phases, 2);
    insta::assert_snapshot!(golden(&p));
}

/// cross_entropy becomes one pass over x: nothing is resident.
#[test]
fn golden_cross_entropy_bf16_online_normalizer() {
    let p = online(Operator::CrossEntropy, DType::Bf16, "64x1003", 128, 2, 1, 0);
    assert!(p.analysis.resident.is_empty(), "{}", p.describe());
    insta::assert_snapshot!(golden(&p));
}

/// Regression (found by the CUDA selftest): with two rows per cluster, the
/// per-row scalar (sum, cross_entropy's loss) was stored only by thread 0
/// of rank 0, so the group's second row was never written. Each row's own
/// first worker stores it now; one row per cluster keeps its old test.
#[test]
fn regression_two_rows_per_cluster_store_each_rows_scalar() {
    for op in [Operator::Sum, Operator::CrossEntropy] {
        let source = |rows_per_group| {
            let request = LayoutRequest {
                workers: 2048,
                pack: 4,
                rows_per_group,
                cluster_group_threads: 256,
                ..Default::default()
            };
            kernel(&make_with(op, DType::F32, "17x16384", request)).source
        };
        let two_rows = source(2);
        assert!(!two_rows.contains("tid == 0 && rank == 0"), "{op:?}");
        assert!(two_rows.contains("if (row_ok && w == 0) p_"), "{op:?}");
        assert!(
            source(1).contains("if (row_ok && tid == 0 && rank == 0) p_"),
            "{op:?}"
        );
    }
}

/// Prefetched rows: a persistent grid (at most one group per row), each
/// group waiting on its row's bulk copy, reading the row from shared
/// memory into its slots, then issuing the next row's copy once every
/// thread has read the buffer.
#[test]
fn golden_rmsnorm_f32_w256_v4_prefetched_rows() {
    let p = make_with(
        Operator::Rmsnorm,
        DType::F32,
        "3x4096",
        LayoutRequest {
            workers: 256,
            pack: 4,
            unroll: 4,
            prefetch_rows: true,
            ..Default::default()
        },
    );
    let prefetch = p.row_prefetch.expect("prefetch applies");
    assert!(p.describe().contains(" prefetch-rows"));
    assert_eq!(prefetch.row_bytes, 4096 * 4);
    assert_eq!(prefetch.buffer_offset % 16, 0);
    // Three rows: three groups, not one per multiprocessor.
    assert_eq!(prefetch.launched_groups, 3);
    let k = kernel(&p);
    assert!(k.name.ends_with("_pf_cp"), "{}", k.name);
    assert_eq!(k.grid, (3, 1, 1));
    // The runtime may launch up to one group a row, as occupancy allows.
    assert_eq!(k.persistent_rows, Some(3));
    assert_eq!(k.shared_bytes, prefetch.total_bytes());
    // x comes from the buffer, never from global memory; the weight does.
    assert!(k
        .source
        .contains("reinterpret_cast<const uint4*>(lf_rowbuf + i0)"));
    assert!(!k.source.contains("p_x + row_off + i0"));
    assert!(k.source.contains("p_weight + i0"));
    // One copy before the loop, one per row after the loading phase.
    assert_eq!(k.source.matches("lf_prefetch(lf_rowbuf, p_x").count(), 2);
    insta::assert_snapshot!(golden(&p));
}

/// Prefetching applies to register plans of one group per row, one row
/// input, whole vector packs, and a row that fits in shared memory.
#[test]
fn prefetched_rows_are_left_out_where_they_cannot_apply() {
    let prefetched = |op, dtype, shape: &str, w, residency| {
        make_with(
            op,
            dtype,
            shape,
            LayoutRequest {
                workers: w,
                pack: 4,
                residency,
                prefetch_rows: true,
                ..Default::default()
            },
        )
        .row_prefetch
    };
    use lanefold_plan::ResidencyRequest::{Registers, Stream};
    let (rms, rln) = (Operator::Rmsnorm, Operator::ResidualLayernorm);
    assert!(prefetched(rms, DType::F32, "4096x32768", 512, Registers)
        .is_some_and(|p| p.launched_groups == Target::h200().multiprocessors));
    assert!(prefetched(Operator::Softmax, DType::Bf16, "8x8192", 256, Registers).is_some());
    // Streamed, a row split over a cluster, two row inputs, a partial
    // pack: none.
    assert!(prefetched(rms, DType::F32, "64x32768", 1024, Stream).is_none());
    assert!(prefetched(rms, DType::F32, "64x65536", 2048, Registers).is_none());
    assert!(prefetched(rln, DType::F32, "64x4096", 256, Registers).is_none());
    assert!(prefetched(rms, DType::F32, "64x4001", 256, Registers).is_none());
}

/// The H200's default for rmsnorm f32 4096x32768: the whole row in one
/// streamed chunk, re-read with L2 hints (x kept by its first load, let go
/// by its re-read; the weight kept), every hinted load read-only (`.nc`),
/// so ptxas may hoist the re-reads above the stores. Its source must stay
/// the one measured in the 2026-11-30 `.nc` benches (in git history at 2d680226; the
/// snapshot pins it).
#[test]
fn golden_rmsnorm_f32_w1024_v4_u8_stream_reread_hints() {
    let p = make_with(
        Operator::Rmsnorm,
        DType::F32,
        "4096x32768",
        LayoutRequest {
            workers: 1024,
            pack: 4,
            unroll: 8,
            residency: ResidencyRequest::Stream,
            reread_hints: true,
            ..Default::default()
        },
    );
    let k = kernel(&p);
    assert_eq!(k.name, "lf_rmsnorm_f32_w1024_v4_u8_g1_stream_rr_cp");
    assert!(k.source.contains("= lf_ld_keep(q + 0, lf_keep);"));
    assert!(k.source.contains("= lf_ld_drop(q + 0, lf_drop);"));
    assert!(k
        .source
        .contains("ld.global.nc.L1::evict_first.L2::cache_hint.v4.u32"));
    assert_eq!(k.carveout_percent, None);
    insta::assert_snapshot!(golden(&p));
}

/// Columns in L1, register plan: x bypasses L1 (`lf_ld_na`), weight and
/// bias load plainly (through L1), and the kernel asks for the largest L1.
#[test]
fn golden_layernorm_f32_w256_v4_l1_columns() {
    let p = make_with(
        Operator::Layernorm,
        DType::F32,
        "64x4096",
        LayoutRequest {
            workers: 256,
            pack: 4,
            unroll: 4,
            residency: ResidencyRequest::Registers,
            l1_columns: true,
            ..Default::default()
        },
    );
    assert!(p.l1_columns);
    assert!(p.describe().contains(" l1-columns"));
    let k = kernel(&p);
    assert_eq!(k.name, "lf_layernorm_f32_w256_v4_u4_g1_l1c_cp");
    assert_eq!(k.carveout_percent, Some(0));
    assert!(k.source.contains("ld.global.nc.L1::no_allocate.v4.u32"));
    let x_loads = k.source.matches("= lf_ld_na(q + 0);").count();
    let plain_loads = k.source.matches("const uint4 a = q[0];").count();
    assert_eq!(
        (x_loads, plain_loads),
        (1, 2),
        "x bypasses L1; weight and bias do not"
    );
    insta::assert_snapshot!(golden(&p));
}

/// Columns in L1 with re-read hints on a streamed plan: the row's loads
/// bypass L1 and carry the L2 policy (`lf_ld_na_hint`), columns keep
/// theirs; softmax, without columns, is not marked and loads as before.
#[test]
fn golden_rmsnorm_f32_w256_v4_stream_reread_l1_columns() {
    let request = LayoutRequest {
        workers: 256,
        pack: 4,
        unroll: 2,
        residency: ResidencyRequest::Stream,
        reread_hints: true,
        l1_columns: true,
        ..Default::default()
    };
    let p = make_with(Operator::Rmsnorm, DType::F32, "8x4096", request);
    let k = kernel(&p);
    assert_eq!(k.name, "lf_rmsnorm_f32_w256_v4_u2_g1_stream_rr_l1c_cp");
    assert!(k.source.contains("= lf_ld_na_hint(q + 0, lf_keep);"));
    assert!(k.source.contains("= lf_ld_na_hint(q + 0, lf_drop);"));
    assert!(
        k.source.contains("= lf_ld_keep(q + 0, lf_keep);"),
        "the weight"
    );
    assert!(!k.source.contains("lf_ld_drop(q"));
    let softmax = make_with(Operator::Softmax, DType::F32, "8x4096", request);
    assert!(!softmax.l1_columns);
    assert!(!kernel(&softmax).source.contains("lf_ld_na"));
    insta::assert_snapshot!(golden(&p));
}

/// Today's default for layernorm f32 32768x4096 keeps its hinted loads
/// ordered (no `.nc`): the snapshot is byte for byte the kernel measured at
/// 250.9 µs in `bench/results/2026-11-30-t1-stream-v13-aa-h200`; `.nc`
/// cost a group per SM and 4-6%.
#[test]
fn golden_layernorm_f32_32768x4096_default_ordered_hinted_loads() {
    let p = make_with(
        Operator::Layernorm,
        DType::F32,
        "32768x4096",
        LayoutRequest {
            mapper: lanefold_plan::MapperPolicy::Model,
            ..Default::default()
        },
    );
    assert!(p.ordered_hinted_loads, "{}", p.describe());
    let k = kernel(&p);
    assert_eq!(k.name, "lf_layernorm_f32_w512_v4_u4_g1_stream_rr_om_cp");
    assert!(k
        .source
        .contains("ld.global.L1::evict_last.L2::cache_hint.v4.u32"));
    assert!(!k.source.contains("ld.global.nc"));
    insta::assert_snapshot!(golden(&p));
}

/// layernorm bf16 32768x4096 keeps its hinted loads ordered too: byte for
/// byte the kernel measured in `bench/results/2026-11-30-t1-stream-v13-aa-h200`.
#[test]
fn golden_layernorm_bf16_32768x4096_default_ordered_hinted_loads() {
    let p = make_with(
        Operator::Layernorm,
        DType::Bf16,
        "32768x4096",
        LayoutRequest {
            mapper: lanefold_plan::MapperPolicy::Model,
            ..Default::default()
        },
    );
    assert!(p.ordered_hinted_loads, "{}", p.describe());
    assert_eq!(p.min_groups_per_multiprocessor, None);
    let k = kernel(&p);
    assert_eq!(k.name, "lf_layernorm_bf16_w256_v8_u4_g1_stream_rr_om_cp");
    assert!(!k.source.contains("ld.global.nc"));
    insta::assert_snapshot!(golden(&p));
}

/// An occupancy cap of one group: the streamed rmsnorm f32 4096x32768
/// kernel folds its pack addresses (one base plus immediates), takes a
/// share of shared memory that leaves no room for a second 1024-thread
/// group in the 8 KiB carve-out it asks for; without the cap the same
/// streamed plan keeps the worker index visible (one group per
/// multiprocessor by registers), and register plans fold.
#[test]
fn an_occupancy_cap_folds_pack_addresses_and_pads_shared_memory() {
    let streamed = |cap| LayoutRequest {
        workers: 1024,
        pack: 4,
        unroll: 8,
        residency: ResidencyRequest::Stream,
        reread_hints: true,
        occupancy_cap: cap,
        no_cold_path: true,
        ..Default::default()
    };
    const FOLD: &str = "asm(\"\" : \"+r\"(w));";
    let capped = make_with(Operator::Rmsnorm, DType::F32, "4096x32768", streamed(1));
    assert!(capped.describe().ends_with(" occupancy-cap=1"));
    let k = kernel(&capped);
    assert_eq!(k.name, "lf_rmsnorm_f32_w1024_v4_u8_g1_stream_rr_cap1");
    assert!(k.source.contains(FOLD));
    // 8 KiB a group with the 1 KiB the hardware keeps; 3% of 228 KiB
    // rounds up to the 8 KiB carve-out.
    assert_eq!((k.shared_bytes, k.carveout_percent), (7 * 1024, Some(3)));
    let plain = kernel(&make_with(
        Operator::Rmsnorm,
        DType::F32,
        "4096x32768",
        streamed(0),
    ));
    assert!(!plain.source.contains(FOLD));
    assert_eq!(plain.carveout_percent, None);
    assert!(plain.shared_bytes < 1024);
    let registers = kernel(&make_with(
        Operator::Layernorm,
        DType::F32,
        "64x4096",
        LayoutRequest {
            workers: 256,
            pack: 4,
            residency: ResidencyRequest::Registers,
            ..Default::default()
        },
    ));
    assert!(registers.source.contains(FOLD));
    // A cap the threads already impose changes nothing.
    let moot = make_with(
        Operator::Layernorm,
        DType::F32,
        "64x4096",
        LayoutRequest {
            workers: 1024,
            pack: 4,
            residency: ResidencyRequest::Registers,
            occupancy_cap: 2,
            ..Default::default()
        },
    );
    assert_eq!(moot.occupancy_cap, None);
}

/// Today's default for rmsnorm f32 4096x32768: the whole row per pass in
/// one 1024-thread group per SM, promised to the compiler, loads batched
/// (252.6 µs in `bench/results/2026-12-01-cpb-rms-aa-h200`;
/// the measurement's freeze test pins the source byte for byte).
#[test]
fn golden_rmsnorm_f32_4096x32768_default_one_row_per_multiprocessor() {
    let p = make_with(
        Operator::Rmsnorm,
        DType::F32,
        "4096x32768",
        LayoutRequest::default(),
    );
    let k = kernel(&p);
    assert_eq!(
        k.name,
        "lf_rmsnorm_f32_w1024_v4_u8_g1_stream_rr_ob1_cap1_cp_bl"
    );
    assert!(k.source.contains("__launch_bounds__(1024, 1)"));
    let keeps = k
        .source
        .matches("lf_b0[c][0] = lf_ld_keep(q + 0, lf_keep);");
    let drops = k
        .source
        .matches("lf_b0[c][0] = lf_ld_drop(q + 0, lf_drop);");
    assert_eq!((keeps.count(), drops.count()), (1, 1));
    assert_eq!((k.shared_bytes, k.carveout_percent), (7 * 1024, Some(3)));
    insta::assert_snapshot!(golden(&p));
}

/// Today's default for layernorm bf16 4096x32768: the row in packed
/// registers, re-widened by `prmt` in the output phase, and weight and
/// bias loaded one chunk at a time below the stores before them (62
/// registers instead of 128, 134.0 µs against 141.7).
#[test]
fn golden_layernorm_bf16_4096x32768_default_packed_ordered_columns() {
    let p = make_with(
        Operator::Layernorm,
        DType::Bf16,
        "4096x32768",
        LayoutRequest::default(),
    );
    let k = kernel(&p);
    assert_eq!(k.name, "lf_layernorm_bf16_w512_v8_u4_g1_oc_pk_om_cp");
    // Eight packs of weight and eight of bias, every one an ordered load;
    // the row itself is read once, by plain read-only loads.
    assert_eq!(k.source.matches("= lf_ld_ord(q + 0)").count(), 2);
    assert!(k.source.contains("asm volatile(\"ld.global.v4.u32"));
    assert!(k.source.contains("lf_rewiden<1>("));
    assert!(!k.source.contains("lf_rewiden<0>("));
    insta::assert_snapshot!(golden(&p));
}

/// residual_layernorm bf16 4096x32768 with h kept resident: phase 0 adds
/// x and the residual once, stores h and packs its storage bits two to a
/// slot word; phase 1 reads only h's slots, weight and bias (one packed
/// tile instead of two, 64 registers under the promise of two
/// groups where x and the residual took 99).
#[test]
fn golden_residual_layernorm_bf16_4096x32768_rounded_resident() {
    let p = make_with(
        Operator::ResidualLayernorm,
        DType::Bf16,
        "4096x32768",
        LayoutRequest {
            workers: 512,
            pack: 8,
            unroll: 4,
            residency: ResidencyRequest::Registers,
            pack_resident: true,
            one_pass_moments: true,
            ordered_columns: true,
            rounded_resident: true,
            occupancy: 2,
            ..Default::default()
        },
    );
    assert!(p.rounded_resident && p.packed_resident, "{}", p.describe());
    let k = kernel(&p);
    assert_eq!(
        k.name,
        "lf_residual_layernorm_bf16_w512_v8_u4_g1_oc_pk_rt_ob2_om_cp"
    );
    // One tile of slots (h's), filled from its storage bits.
    assert_eq!(
        k.source.matches("private slots of a resident tile").count(),
        1
    );
    assert!(k.source.contains("= lf_bits("));
    // x and the residual are loaded in phase 0 only; phase 1 re-widens h.
    let phase1 = &k.source[k.source.find("// ---- phase 1 ----").unwrap()..];
    // (The cold path, after the last phase, reads the row again.)
    let phase1 = &phase1[..phase1.find("lf_cold_stats(").unwrap()];
    assert!(!phase1.contains("p_x") && !phase1.contains("p_residual"));
    assert!(phase1.contains("lf_rewiden<1>("));
    insta::assert_snapshot!(golden(&p));
}

/// Without `rounded_resident` the same request keeps x and the residual
/// (two tiles) and recomputes h in phase 1; with it on a streamed plan,
/// nothing changes (a streamed plan re-reads loads, not computed tiles).
#[test]
fn rounded_resident_applies_to_register_plans_only() {
    let request = |residency, rounded_resident| LayoutRequest {
        workers: 256,
        pack: 4,
        residency,
        rounded_resident,
        ..Default::default()
    };
    let plain = make_with(
        Operator::ResidualLayernorm,
        DType::Bf16,
        "37x4096",
        request(ResidencyRequest::Registers, false),
    );
    let kept = make_with(
        Operator::ResidualLayernorm,
        DType::Bf16,
        "37x4096",
        request(ResidencyRequest::Registers, true),
    );
    assert_eq!(
        (plain.analysis.resident.len(), kept.analysis.resident.len()),
        (2, 1)
    );
    assert!(kept.rounded_resident && !plain.rounded_resident);
    assert_eq!(kept.resident_slots * 2, plain.resident_slots);
    let streamed = make_with(
        Operator::ResidualLayernorm,
        DType::Bf16,
        "37x4096",
        request(ResidencyRequest::Stream, true),
    );
    assert!(!streamed.rounded_resident);
    assert_eq!(streamed.analysis.resident.len(), 2);
    assert_eq!(
        kernel(&streamed).source,
        kernel(&make_with(
            Operator::ResidualLayernorm,
            DType::Bf16,
            "37x4096",
            request(ResidencyRequest::Stream, false),
        ))
        .source
    );
    let layernorm = make_with(
        Operator::Layernorm,
        DType::Bf16,
        "37x4096",
        request(ResidencyRequest::Registers, true),
    );
    assert!(!layernorm.rounded_resident);
}

/// A persistent cluster grid: the cluster loops over rows
/// `lf_cluster, lf_cluster + lf_clusters, ...`; the staged columns are
/// copied once, before the loop; the pushed partials alternate between two
/// sets of slots and barriers (`lf_set`), each waited for at its phase
/// (`lf_parity`) and armed again for the row after next.
#[test]
fn golden_layernorm_bf16_w2048_v4_persistent_clusters_staged() {
    let p = make_with(
        Operator::Layernorm,
        DType::Bf16,
        "37x16384",
        LayoutRequest {
            workers: 2048,
            pack: 4,
            unroll: 1,
            residency: ResidencyRequest::Registers,
            cluster_group_threads: 256,
            stage_columns: true,
            push_cluster_reduce: true,
            persistent_clusters: true,
            one_pass_moments: true,
            ..Default::default()
        },
    );
    assert!(
        p.persistent_clusters && p.staged_columns(),
        "{}",
        p.describe()
    );
    let k = kernel(&p);
    assert!(k.name.ends_with("_pr_pc_om_cp"), "{}", k.name);
    assert_eq!(k.persistent_rows, Some(37));
    let body = &k.source[k.source.find("__global__").unwrap()..];
    let looped = body.find("for (int row = lf_cluster;").unwrap();
    // Staged once and the barriers armed once, both before the loop.
    assert!(body.find("lf_cp_async_").unwrap() < looped);
    assert!(body.find("mbarrier.init").unwrap() < looped);
    assert_eq!(body.matches("barrier.cluster.wait.aligned").count(), 1);
    // One reduction pair (one-pass moments): two pushes, two waits at the
    // row's phase, one arm each for the row after next.
    assert_eq!(body.matches("lf_push_wait_parity(").count(), 2);
    assert_eq!(body.matches("lf_push_arm(").count(), 2);
    assert!(!body.contains("lf_push_wait("));
    assert!(k.shared_bytes <= p.shared_bytes);
    insta::assert_snapshot!(golden(&p));
}

#[test]
fn persistent_clusters_apply_to_pushed_cluster_register_plans_only() {
    let request = |push_cluster_reduce, residency| LayoutRequest {
        workers: 2048,
        pack: 4,
        cluster_group_threads: 256,
        push_cluster_reduce,
        residency,
        persistent_clusters: true,
        ..Default::default()
    };
    let pushed = make_with(
        Operator::Rmsnorm,
        DType::F32,
        "5x8192",
        request(true, ResidencyRequest::Registers),
    );
    assert!(pushed.persistent_clusters);
    for (p, why) in [
        (
            make_with(
                Operator::Rmsnorm,
                DType::F32,
                "5x8192",
                request(false, ResidencyRequest::Registers),
            ),
            "not pushed",
        ),
        (
            make_with(
                Operator::Rmsnorm,
                DType::F32,
                "5x8192",
                request(true, ResidencyRequest::Stream),
            ),
            "streamed",
        ),
        (
            make_with(
                Operator::Rmsnorm,
                DType::F32,
                "5x512",
                LayoutRequest {
                    workers: 128,
                    ..request(true, ResidencyRequest::Registers)
                },
            ),
            "one group a row",
        ),
    ] {
        assert!(!p.persistent_clusters, "{why}: {}", p.describe());
        assert_eq!(kernel(&p).persistent_rows, None, "{why}");
    }
}

/// A persistent cluster that prefetches: each group copies
/// its own share of the cluster's next row, one bulk copy per chunk of
/// W x V elements (`LF_COPIES`), into shared memory, waits for it at the
/// top of the loop (phase `lf_it & 1`) and issues the next copy once every
/// thread holds its slots; its loads read the share chunk by chunk.
#[test]
fn golden_layernorm_f32_w2048_v4_persistent_clusters_prefetched() {
    let p = make_with(
        Operator::Layernorm,
        DType::F32,
        "37x16384",
        LayoutRequest {
            workers: 2048,
            pack: 4,
            unroll: 2,
            residency: ResidencyRequest::Registers,
            cluster_group_threads: 256,
            push_cluster_reduce: true,
            persistent_clusters: true,
            prefetch_rows: true,
            one_pass_moments: true,
            ..Default::default()
        },
    );
    let prefetch = p.row_prefetch.expect("a persistent cluster prefetches");
    assert_eq!(p.groups_per_row, 8);
    // A group's share: 16384 / 8 elements of 4 bytes.
    assert_eq!(prefetch.row_bytes, 16384 / 8 * 4);
    assert_eq!(prefetch.launched_groups % 8, 0);
    let k = kernel(&p);
    assert!(k.name.ends_with("_pr_pc_pf_om_cp"), "{}", k.name);
    assert_eq!(k.persistent_rows, Some(37));
    assert_eq!(k.grid.0, prefetch.launched_groups);
    assert_eq!(k.shared_bytes, prefetch.total_bytes());
    // 16384 / (2048 x 4) chunks, each 256 threads x 4 elements.
    assert!(k.source.contains("#define LF_COPIES 2\n"));
    assert!(k.source.contains("#define LF_COPY_ELEMS 1024\n"));
    assert!(k.source.contains("#define LF_COPY_STRIDE 8192\n"));
    let body = &k.source[k.source.find("__global__").unwrap()..];
    let looped = body.find("for (int row = lf_cluster;").unwrap();
    let first = body.find("lf_prefetch(lf_rowbuf").unwrap();
    assert!(first < looped, "the first row's copy comes before the loop");
    assert!(body[..first].contains("lf_prefetch_init("));
    assert!(body[looped..].contains("lf_prefetch_wait(lf_rowbar, lf_it & 1u)"));
    assert!(body[looped..].contains("row + lf_clusters < rows) lf_prefetch("));
    assert_eq!(body.matches(" + rank * 1024, lf_rowbar)").count(), 2);
    assert!(body.contains("lf_rowbuf + ((c) * 256 + tid) * LF_V"));
    insta::assert_snapshot!(golden(&p));
}

#[test]
fn prefetched_rows_in_clusters_need_persistent_clusters() {
    let request = |persistent_clusters| LayoutRequest {
        workers: 2048,
        pack: 4,
        residency: ResidencyRequest::Registers,
        cluster_group_threads: 256,
        push_cluster_reduce: true,
        persistent_clusters,
        prefetch_rows: true,
        ..Default::default()
    };
    let plain = make_with(Operator::Rmsnorm, DType::F32, "5x16384", request(false));
    assert!(plain.groups_per_row > 1);
    assert_eq!(plain.row_prefetch, None, "{}", plain.describe());
    let persistent = make_with(Operator::Rmsnorm, DType::F32, "5x16384", request(true));
    assert!(
        persistent.row_prefetch.is_some(),
        "{}",
        persistent.describe()
    );
}

/// The self-signalling form of every default kernel of the six operators
/// (clusters, persistent and streamed plans among them): the original
/// kernel text is kept whole, the three parameters close the signature,
/// and the epilogue is the last thing in the body.
#[test]
fn self_signalling_keeps_every_default_kernel_and_ends_it_with_the_signal() {
    let shapes = [
        "1x127",
        "17x257",
        "1024x4096",
        "64x32768",
        "4x131072",
        "2x262144",
    ];
    let mut clusters = 0;
    for op in Operator::SIX {
        for dtype in [DType::F32, DType::Bf16] {
            for shape in shapes {
                let k = kernel(&make_with(op, dtype, shape, LayoutRequest::default()));
                clusters += usize::from(k.cluster.is_some());
                let (head, tail) = k.source.split_at(k.source.find(")\n{").unwrap());
                let body = tail.trim_end().strip_suffix('}').unwrap();
                for signal in Signal::ALL {
                    let s = self_signalling(&k, signal)
                        .unwrap_or_else(|e| panic!("{} {signal:?}: {e}", k.name));
                    let what = format!("{} {signal:?}", k.name);
                    assert!(
                        s.source.starts_with(head),
                        "{what}: the text before the signature's end"
                    );
                    assert!(
                        s.source.contains("unsigned lf_done_word)\n{"),
                        "{what}: the parameters close the signature"
                    );
                    let kept = s
                        .source
                        .find(body)
                        .unwrap_or_else(|| panic!("{what}: the body is kept whole"));
                    let epilogue = s.source.rfind("    // lanefold's call path:").unwrap();
                    assert!(epilogue > kept, "{what}: the signal follows the body");
                    assert!(s.source[epilogue..].contains("= lf_done_word;"), "{what}");
                    assert!(
                        s.source.trim_end().ends_with("        }\n    }\n}"),
                        "{what}: the signal ends the kernel"
                    );
                    assert_eq!((s.grid, s.block, s.cluster), (k.grid, k.block, k.cluster));
                    assert_eq!(
                        s.params, k.params,
                        "the appended parameters are the runtime's"
                    );
                }
            }
        }
    }
    assert!(clusters > 0, "the sweep includes cluster kernels");
}

#[test]
fn self_signalling_refuses_text_it_cannot_place_the_signal_in() {
    let k = kernel(&make(Operator::Softmax, DType::F32, "64x4096", 256, 4, 1));
    let once = self_signalling(&k, Signal::Ticket).unwrap();
    let twice = self_signalling(&once, Signal::Watcher).unwrap_err();
    assert!(
        twice.to_string().contains("already self-signalling"),
        "{twice}"
    );
    let trailing = Kernel {
        source: format!("{}\n__device__ int after;\n", k.source),
        ..k.clone()
    };
    let e = self_signalling(&trailing, Signal::Ticket).unwrap_err();
    assert!(e.to_string().contains("last definition"), "{e}");
    let renamed = Kernel {
        name: "lf_other".into(),
        ..k.clone()
    };
    let e = self_signalling(&renamed, Signal::Ticket).unwrap_err();
    assert!(e.to_string().contains("not named"), "{e}");
    let cut = Kernel {
        source: k.source[..k.source.len() - 3].to_string(),
        ..k
    };
    let e = self_signalling(&cut, Signal::Watcher).unwrap_err();
    assert!(e.to_string().contains("unbalanced body"), "{e}");
}

#[test]
fn golden_softmax_f32_w256_v4_self_signalling() {
    let k = kernel(&make(Operator::Softmax, DType::F32, "64x4096", 256, 4, 1));
    insta::assert_snapshot!(self_signalling(&k, Signal::Ticket).unwrap().source);
}

#[test]
fn golden_softmax_f32_w256_v4_self_signalling_watcher() {
    let k = kernel(&make(Operator::Softmax, DType::F32, "64x4096", 256, 4, 1));
    insta::assert_snapshot!(self_signalling(&k, Signal::Watcher).unwrap().source);
}

/// Layernorm bf16 3x32768 in the long-row default's form (W=2048 V=8 in
/// clusters of 256-thread groups, pushed, packed tiles, one-pass moments)
/// with `policies`' load policies.
fn pushed_packed_layernorm_bf16(policies: LayoutRequest) -> Plan {
    make_with(
        Operator::Layernorm,
        DType::Bf16,
        "3x32768",
        LayoutRequest {
            workers: 2048,
            pack: 8,
            unroll: 2,
            cluster_group_threads: 256,
            pack_resident: true,
            push_cluster_reduce: true,
            one_pass_moments: true,
            ..policies
        },
    )
}

/// The long-row layernorm default's form (pushed cluster, packed tiles,
/// one-pass moments) with early columns: the first chunk's weight and
/// bias load before the pushed exchange's wait, and only the later chunks
/// load in the output loop.
#[test]
fn golden_layernorm_bf16_w2048_v8_pushed_early_columns() {
    let p = pushed_packed_layernorm_bf16(LayoutRequest {
        early_columns: 1,
        ..Default::default()
    });
    assert_eq!(p.early_columns, 1, "{}", p.describe());
    let k = kernel(&p);
    assert!(k.name.contains("_ec1"), "{}", k.name);
    insta::assert_snapshot!(golden(&p));
}

/// Early loads sit after the row tile's loads and before the first wait
/// of the reduction that precedes the output phase, in one group (the
/// warp exchange's `__syncthreads`) and in a pushed cluster
/// (`lf_push_wait`); two-pass layernorm loads them before its second
/// (variance) reduction, not its first.
#[test]
fn early_columns_load_before_the_last_reduction_exchange() {
    let request = |workers, one_pass| LayoutRequest {
        workers,
        pack: 4,
        unroll: 1,
        cluster_group_threads: 256,
        push_cluster_reduce: true,
        one_pass_moments: one_pass,
        early_columns: 2,
        ..Default::default()
    };
    for (op, shape, workers, one_pass, wait) in [
        (Operator::Rmsnorm, "4x4096", 256, false, "__syncthreads();"),
        (Operator::Layernorm, "4x32768", 2048, true, "lf_push_wait("),
        (Operator::Layernorm, "4x32768", 2048, false, "lf_push_wait("),
    ] {
        let p = make_with(op, DType::F32, shape, request(workers, one_pass));
        assert_eq!(p.early_columns, 2, "{}", p.describe());
        let src = kernel(&p).source;
        let early = src
            .find("// the columns of phase")
            .unwrap_or_else(|| panic!("{op} {shape}: no early loads"));
        let phase = |q: usize| src.find(&format!("// ---- phase {q} ----")).unwrap();
        let out = p.analysis.num_phases - 1;
        // The reduction the loads precede is the output phase's previous one.
        assert!(early > phase(out - 1) && early < phase(out), "{op} {shape}");
        let first_wait_after = src[early..].find(wait).map(|i| i + early);
        assert!(
            first_wait_after.is_some_and(|w| w < phase(out)),
            "{op} {shape}"
        );
        // Chunks 0 and 1 take the early registers; the loop's later chunks load.
        assert!(src.contains("c < 2 ? lf_e"), "{op} {shape}");
    }
}

/// The long-row f32 layernorm form with the row's last two chunks in
/// shared memory: copied by `cp.async` before phase 0, waited for at the
/// first shared chunk, read back from `lf_sh` in the output phase.
#[test]
fn golden_layernorm_f32_w2048_v4_pushed_shared_chunks() {
    let p = make_with(
        Operator::Layernorm,
        DType::F32,
        "3x32768",
        LayoutRequest {
            workers: 2048,
            pack: 4,
            unroll: 2,
            cluster_group_threads: 256,
            push_cluster_reduce: true,
            one_pass_moments: true,
            shared_chunks: 2,
            ..Default::default()
        },
    );
    let shared = p.shared_chunks.expect("shared chunks apply");
    // 2 chunks x 256 threads x 4 floats, after the reduction slots.
    assert_eq!(shared.bytes, 2 * 256 * 4 * 4);
    assert_eq!(p.shared_bytes, shared.offset_bytes + shared.bytes);
    let k = kernel(&p);
    assert!(k.name.contains("_sh2"), "{}", k.name);
    assert_eq!(k.carveout_percent, Some(100));
    // Regression (every shared-chunk kernel ran past its shared
    // memory): the launch asks for the chunks' bytes too.
    assert_eq!(k.shared_bytes, p.shared_bytes);
    insta::assert_snapshot!(golden(&p));
}

/// Shared chunks leave the registers: every slot written or read is below
/// the first shared chunk, the copies start before phase 0's loads, and
/// the wait sits inside phase 0 (after the register chunks' loads are
/// issued), for plain and packed tiles.
#[test]
fn shared_chunks_are_copied_first_and_waited_for_inside_phase_zero() {
    let in_registers = |op, dtype, packed, shared_chunks| {
        in_registers_w256_v4(op, dtype, "4x4096", |r| {
            r.pack_resident = packed;
            r.shared_chunks = shared_chunks;
        })
    };
    for packed in [false, true] {
        let p = in_registers(Operator::Rmsnorm, DType::Bf16, packed, 3);
        assert_eq!(
            p.shared_chunks.map(|s| s.chunks),
            Some(3),
            "{}",
            p.describe()
        );
        let src = kernel(&p).source;
        assert!(src.contains("#define LF_SH0 1 "), "{src}");
        let copy = src.find("lf_cp_async_8(&lf_sh[").expect("copies");
        let phase0 = src.find("// ---- phase 0 ----").unwrap();
        let phase1 = src.find("// ---- phase 1 ----").unwrap();
        let wait = src.find("cp.async.wait_all").unwrap();
        assert!(copy < phase0 && phase0 < wait && wait < phase1);
        // Slot writes only where the chunk is not shared.
        for line in src
            .lines()
            .filter(|l| l.contains("r0[") && l.contains(" = "))
        {
            assert!(
                line.contains("if (!lf_shc)") || !line.trim_start().starts_with("r0["),
                "{line}"
            );
        }
        assert!(src[phase1..].contains("lf_shc ? s0[e]"), "{src}");
    }
    // Clamped to the row's chunks; refused (None) on two row inputs.
    let p = in_registers(Operator::Rmsnorm, DType::F32, false, 9);
    assert_eq!(p.shared_chunks.map(|s| s.chunks), Some(4));
    let p = in_registers(Operator::ResidualLayernorm, DType::F32, false, 2);
    assert_eq!(p.shared_chunks, None, "{}", p.describe());
}

/// A register plan of 256 workers and packs of four, edited by `edit`.
fn in_registers_w256_v4(
    op: Operator,
    dtype: DType,
    shape: &str,
    edit: impl FnOnce(&mut LayoutRequest),
) -> Plan {
    let mut request = LayoutRequest {
        workers: 256,
        pack: 4,
        unroll: 1,
        residency: lanefold_plan::ResidencyRequest::Registers,
        ..Default::default()
    };
    edit(&mut request);
    make_with(op, dtype, shape, request)
}

/// Each phase's partial-chunk block of a kernel source, up to the next
/// phase.
fn partial_chunk_blocks(src: &str) -> Vec<&str> {
    src.split("{ // the partial")
        .skip(1)
        .map(|b| &b[..b.find("// ---- phase").unwrap_or(b.len())])
        .collect()
}

/// Regression (shared chunks refused on every row ending in a partial
/// chunk, so f32 layernorm rows of 17.8 chunks ran at three groups an SM
/// where rows of 16 ran four): the complete chunks before the partial one
/// are shared, the partial chunk stays in registers, and a row ending in
/// a partial pack (no vector copies) keeps none.
#[test]
fn shared_chunks_sit_before_a_partial_chunk_held_in_registers() {
    let plan = |shape| {
        in_registers_w256_v4(Operator::Rmsnorm, DType::F32, shape, |r| {
            r.shared_chunks = 2
        })
    };
    // 3 complete chunks of 1024 and one of 928 (232 whole packs).
    let p = plan("4x4000");
    assert_eq!(
        p.shared_chunks.map(|s| s.chunks),
        Some(2),
        "{}",
        p.describe()
    );
    let src = kernel(&p).source;
    assert!(src.contains("#define LF_SH0 1 "), "{src}");
    let partial = partial_chunk_blocks(&src);
    assert_eq!(partial.len(), 2, "one partial chunk a phase");
    for block in partial {
        assert!(
            !block.contains("lf_sh") && !block.contains("s0["),
            "{block}"
        );
        assert!(block.contains("r0[LF_FULL * LF_V + e]"), "{block}");
    }
    let p = plan("4x4002");
    assert_eq!(p.shared_chunks, None, "{}", p.describe());
}

/// Regression (packed 16-bit tiles refused on every row ending in a
/// partial chunk, so such bf16 softmax rows past the L2 streamed): the
/// partial chunk's elements, read one by one, fill their packed slots
/// with their storage bits, and later phases widen them from there.
#[test]
fn packed_tiles_fill_a_partial_chunk_from_storage_bits() {
    let p = in_registers_w256_v4(Operator::Softmax, DType::Bf16, "4x4000", |r| {
        r.pack_resident = true
    });
    assert!(p.packed_resident, "{}", p.describe());
    let src = kernel(&p).source;
    let partial = partial_chunk_blocks(&src);
    let slot = "r0[(LF_FULL * LF_V + e) >> 1]";
    assert!(
        partial[0].contains(&format!("{slot} = lf_bits(")),
        "{}",
        partial[0]
    );
    assert!(
        partial[1..]
            .iter()
            .any(|b| b.contains(&format!("lf_rewiden<1>({slot}"))),
        "{src}"
    );
}

/// The fused output form on a bf16 row: `h * rstd + (-(mean * rstd))`,
/// which NVCC contracts into one FMA per element, then weight and bias.
#[test]
fn golden_layernorm_bf16_w256_v8_fused_output_one_pass_moments() {
    let p = make_with(
        Operator::Layernorm,
        DType::Bf16,
        "64x4096",
        LayoutRequest {
            workers: 256,
            pack: 8,
            unroll: 1,
            one_pass_moments: true,
            fused_output: true,
            ..Default::default()
        },
    );
    assert!(p.fused_output() && p.one_pass_moments(), "{}", p.describe());
    let k = kernel(&p);
    assert!(k.name.ends_with("_om_fo_cp"), "{}", k.name);
    // One negated shift per row, no per-element subtraction of the mean.
    assert_eq!(k.source.matches(" = -").count(), 1);
    insta::assert_snapshot!(golden(&p));
}

/// L2 prefetch of the row two ahead, in the long-row layernorm form (a
/// pushed cluster of packed tiles): each group's share of every chunk is
/// one bulk prefetch, offset by its rank, issued before the row's loads
/// and skipped past the last row; a one-group plan has no rank offset and
/// prefetches its residual too.
#[test]
fn golden_layernorm_bf16_w2048_v8_pushed_l2_prefetch() {
    let p = pushed_packed_layernorm_bf16(LayoutRequest {
        l2_prefetch_rows: 2,
        ..Default::default()
    });
    assert_eq!(p.l2_prefetch_rows, 2, "{}", p.describe());
    let k = kernel(&p);
    assert!(k.name.contains("_l2p2"), "{}", k.name);
    let s = &k.source;
    // 256 threads x 8 elements a group share of each 16384-element chunk.
    assert!(s.contains("#define LF_L2_SHARE 2048"), "{s}");
    assert!(s.contains("if (row + LF_L2_AHEAD < rows) {"));
    assert!(s.contains("(size_t)rank * LF_L2_SHARE"));
    let prefetch = s.find("lf_prefetch_l2(p_x + at").unwrap();
    let first_load = s.find("p_x + row_off").unwrap();
    assert!(
        prefetch < first_load,
        "the prefetch goes out before the row's loads"
    );
    insta::assert_snapshot!(golden(&p));

    let one_group = make_with(
        Operator::ResidualLayernorm,
        DType::F32,
        "5x4096",
        LayoutRequest {
            workers: 256,
            pack: 4,
            unroll: 1,
            residency: ResidencyRequest::Registers,
            l2_prefetch_rows: 3,
            ..Default::default()
        },
    );
    let s = kernel(&one_group).source;
    assert!(s.contains("#define LF_L2_SHARE 1024"), "{s}");
    assert!(!s.contains("rank * LF_L2_SHARE"));
    assert!(s.contains("lf_prefetch_l2(p_x + at"));
    assert!(s.contains("lf_prefetch_l2(p_residual + at"));
}

/// Where a group holds several rows, or the row is streamed, there is no
/// one row share to prefetch: the request is dropped, and the source and
/// name stay the plain plan's.
#[test]
fn l2_prefetch_applies_only_to_register_plans_of_one_row_per_group() {
    for (residency, rows_per_group) in [
        (ResidencyRequest::Stream, 1),
        (ResidencyRequest::Registers, 2),
    ] {
        let request = LayoutRequest {
            workers: 128,
            pack: 4,
            unroll: 1,
            rows_per_group,
            residency,
            ..Default::default()
        };
        let plain = make_with(Operator::Rmsnorm, DType::F32, "8x4096", request);
        let asked = make_with(
            Operator::Rmsnorm,
            DType::F32,
            "8x4096",
            LayoutRequest {
                l2_prefetch_rows: 4,
                ..request
            },
        );
        assert_eq!(asked.l2_prefetch_rows, 0, "{}", asked.describe());
        assert_eq!(kernel(&asked).source, kernel(&plain).source);
    }
}

/// A worker whose elements so far are all masked (-inf) adds exp(x - 0)
/// = 0 to its running sum instead of exp(-inf - -inf) = NaN: the guard on
/// the running maximum is in every online normalizer's pack loop, and the
/// plain two-pass softmax has none to need.
#[test]
fn online_normalizers_guard_a_minus_inf_running_maximum() {
    for (op, dtype) in [
        (Operator::Softmax, DType::F32),
        (Operator::CrossEntropy, DType::Bf16),
    ] {
        let p = online(op, dtype, "64x4096", 256, 4, 1, 0);
        let src = kernel(&p).source;
        let guard = "== __int_as_float(0xff800000) ? 0.0f :";
        assert!(src.contains(guard), "{op}: {src}");
        assert!(!src.contains("lf_px1[e] - a0)"), "{op}: unguarded push");
    }
    let plain = make(Operator::Softmax, DType::F32, "64x4096", 256, 4, 1);
    assert!(!kernel(&plain).source.contains("0xff800000) ? 0.0f"));
}

/// Masked long rows went NaN in online-normalizer kernels: every family
/// that carries the online normalizer (registers, streamed, clusters,
/// pushed cluster reductions, persistent clusters, prefetched rows) guards
/// each push, and no push subtracts an unguarded running maximum.
#[test]
fn regression_masked_long_rows_went_nan_in_every_online_normalizer_family() {
    for schedule in [
        "W=1024 V=4 G=1 online-normalizer",
        "W=1024 V=4 G=1 stream online-normalizer",
        "W=8192 V=4 G=1 online-normalizer",
        "W=8192 V=4 G=1 push-reduce online-normalizer",
        "W=8192 V=4 G=1 push-reduce persistent-clusters online-normalizer",
        "W=1024 V=4 G=1 prefetch-rows online-normalizer",
    ] {
        for op in [Operator::Softmax, Operator::CrossEntropy] {
            let request: LayoutRequest = schedule.parse().unwrap();
            let p = make_with(op, DType::Bf16, "64x65536", request);
            assert!(p.online_normalizer(), "{op} {schedule}");
            let src = kernel(&p).source;
            let pushes = src.matches("+= lf_exp(lf_px").count();
            assert!(pushes > 0, "{op} {schedule}");
            assert_eq!(
                src.matches("- lf_bm").count(),
                pushes,
                "{op} {schedule}: {src}"
            );
        }
    }
}

/// By default the norms' kernels test their statistics once per row and
/// call the non-inlined `lf_cold_stats` and `lf_cold_out` after the row's
/// last phase; with `no-cold-path` they carry none of it and are the
/// kernels of a program without [`lanefold_ir::Instr::Rescaled`]. Other
/// operators' kernels are the same either way.
#[test]
fn default_norm_kernels_call_the_cold_functions_and_no_cold_path_kernels_carry_none() {
    for op in Operator::SIX {
        for request in [
            "W=256 V=4 G=1",
            "W=256 V=4 G=1 stream",
            "W=2048 V=4 G=1 push-reduce",
            "W=256 V=4 G=1 prefetch-rows",
            "W=128 V=4 G=2",
        ] {
            let asked: LayoutRequest = request.parse().unwrap();
            let plain = LayoutRequest {
                no_cold_path: true,
                ..asked
            };
            let plain = make_with(op, DType::Bf16, "64x16384", plain);
            let asked = make_with(op, DType::Bf16, "64x16384", asked);
            let norm = matches!(
                op,
                Operator::Rmsnorm | Operator::Layernorm | Operator::ResidualLayernorm
            );
            assert!(!kernel(&plain).source.contains("lf_cold"), "{op} {request}");
            assert_eq!(asked.cold_path(), norm, "{op} {request}");
            assert_eq!(plain.declines_cold_path(), norm, "{op} {request}");
            // The default's schedule names nothing new; the plain one's
            // says what it left out.
            assert!(!asked.describe().contains("cold-path"), "{op} {request}");
            assert_eq!(
                plain.describe().contains("no-cold-path"),
                norm,
                "{op} {request}"
            );
            let src = kernel(&asked).source;
            assert_eq!(src.contains("lf_cold_out("), norm, "{op} {request}");
            if norm {
                assert!(src.contains("__noinline__ float4 lf_cold_stats("), "{src}");
                assert!(src.contains("const bool lf_cold = !("), "{src}");
                // Called after the row's last phase.
                let last_phase = src.rfind("// ---- phase").unwrap();
                assert!(src.rfind("lf_cold_out(").unwrap() > last_phase, "{src}");
            } else {
                assert_eq!(src, kernel(&plain).source, "{op} {request}");
            }
        }
    }
}

#[test]
fn regression_a_row_shorter_than_one_chunk_loads_its_whole_packs_as_vectors() {
    // 64x3072 bf16 at W=512 V=8: no complete chunk, so every element went
    // through the guarded scalar path (2.97 µs against 1.74 for V=4).
    let p = make(Operator::Rmsnorm, DType::Bf16, "64x3072", 512, 8, 1);
    let src = generate(&p, &CodegenOptions::default()).unwrap().source;
    assert!(src.contains("#define LF_FULL 0"), "{src}");
    assert!(src.contains("(LF_FULL * LF_W + w) * LF_V + LF_V <= LF_N"));
    // Input and weight are read as 16-byte vectors, the output written so.
    assert_eq!(
        src.matches("reinterpret_cast<const uint4*>").count(),
        2,
        "{src}"
    );
    assert_eq!(src.matches("reinterpret_cast<uint4*>").count(), 1, "{src}");
    // Unaligned rows have no vector access: only the guarded form.
    let q = make(Operator::Rmsnorm, DType::Bf16, "64x3075", 512, 4, 1);
    let src = generate(&q, &CodegenOptions::default()).unwrap().source;
    assert!(!src.contains("+ LF_V <= LF_N"), "{src}");
}

/// A register plan's partial chunk loaded its whole pack in the branch
/// after the complete chunks' loop, so the load waited on their sums: two
/// memory round trips per phase (0.2-0.4 µs on decode rows). Its loads now
/// come first, in every phase that loads a row or column there, and the
/// partial chunk reads them back.
#[test]
fn regression_the_partial_chunk_loads_before_the_complete_chunks() {
    // 7168 = 896 packs of 8: one complete chunk of 512, a partial of 384.
    let p = make(Operator::Rmsnorm, DType::Bf16, "64x7168", 512, 8, 1);
    let src = generate(&p, &CodegenOptions::default()).unwrap().source;
    let phase0 = src.find("// ---- phase 0 ----").unwrap();
    let phase1 = src.find("// ---- phase 1 ----").unwrap();
    let body = &src[phase0..phase1];
    let preload = body
        .find("lf_t")
        .unwrap_or_else(|| panic!("no preload in phase 0:\n{body}"));
    let complete = body.find("for (int c = 0; c < LF_FULL; ++c)").unwrap();
    assert!(preload < complete, "{body}");
    assert!(
        body.contains("// loaded before the complete chunks"),
        "{body}"
    );
    // Streamed plans keep their loop's order: their preloads would live
    // across every unrolled iteration.
    let q = make_with(
        Operator::Rmsnorm,
        DType::Bf16,
        "4x33000",
        "W=1024 V=8 U=4 stream".parse().unwrap(),
    );
    assert_eq!(q.residency, lanefold_plan::Residency::Stream);
    let src = generate(&q, &CodegenOptions::default()).unwrap().source;
    assert!(!src.contains("lf_whole"), "{src}");
}

/// One backward kernel per operator: the per-row scalar input (dloss) is
/// read once per row, the one-hot term is a masked broadcast, the norms'
/// two sums share a phase, and cross_entropy_with_grad stores both its
/// outputs.
#[test]
fn golden_backward_kernels() {
    for (op, dtype, shape, w, v) in [
        (Operator::RmsnormBackward, DType::Bf16, "64x4096", 256, 8),
        (Operator::LayernormBackward, DType::Bf16, "64x4096", 256, 8),
        (
            Operator::ResidualLayernormBackward,
            DType::F32,
            "64x4096",
            256,
            4,
        ),
        (Operator::SoftmaxBackward, DType::F32, "17x257", 32, 4),
        (
            Operator::CrossEntropyBackward,
            DType::Bf16,
            "64x4096",
            256,
            8,
        ),
        (
            Operator::CrossEntropyBackwardRecompute,
            DType::Bf16,
            "64x4096",
            256,
            8,
        ),
        (
            Operator::CrossEntropyWithGrad,
            DType::Bf16,
            "64x4096",
            256,
            8,
        ),
    ] {
        let p = make(op, dtype, shape, w, v, 1);
        let g = golden(&p);
        if op.forward() == Some(Operator::CrossEntropy) {
            assert!(g.contains("lf_widen(p_dloss[row_c])"), "{g}");
        }
        if op == Operator::CrossEntropyBackward {
            // The saved lse read as f32, one pass over x, no reduction.
            assert!(g.contains("const float* __restrict__ p_lse"), "{g}");
            assert!(g.contains("p_lse[row_c]"), "{g}");
            assert!(!g.contains("lf_widen(p_lse"), "{g}");
            assert!(!g.contains("__shfl_xor_sync"), "{g}");
        }
        if op == Operator::CrossEntropyWithGrad {
            // The loss by the row's first worker, dx by every worker.
            assert_eq!(g.matches("p_loss[row] = ").count(), 1, "{g}");
            assert!(g.contains("p_dx + row_off"), "{g}");
        }
        insta::assert_snapshot!(format!("golden_{op}_{dtype}"), g);
    }
}

/// cross_entropy_with_lse: the forward's kernel plus an f32 lse stored
/// unrounded by the row's first worker, in both normalizer forms; the
/// default forward's kernel (its own golden files) has no lse.
#[test]
fn golden_cross_entropy_with_lse() {
    for online_normalizer in [false, true] {
        let request = LayoutRequest {
            workers: 256,
            pack: 8,
            unroll: 1,
            online_normalizer,
            ..Default::default()
        };
        let p = make_with(
            Operator::CrossEntropyWithLse,
            DType::Bf16,
            "64x4096",
            request,
        );
        let g = golden(&p);
        assert!(g.contains("float* __restrict__ p_lse"), "{g}");
        assert_eq!(g.matches("p_lse[row] = (").count(), 1, "{g}");
        assert_eq!(g.matches("p_loss[row] = lf_narrow(").count(), 1, "{g}");
        let plain = golden(&make_with(
            Operator::CrossEntropy,
            DType::Bf16,
            "64x4096",
            request,
        ));
        assert!(!plain.contains("lse"), "{plain}");
        let suffix = if online_normalizer {
            "_online_normalizer"
        } else {
            ""
        };
        insta::assert_snapshot!(format!("golden_cross_entropy_with_lse_bf16{suffix}"), g);
    }
}

/// The partial chunk's columns, counted by an early count past the
/// complete chunks, load as the reduction's phase starts (before the
/// row's own loads) and the output phase reads them from there in both
/// of its partial forms (whole packs and the guarded last pack); the
/// complete chunks' early loads keep their place before the exchange.
#[test]
fn early_columns_of_the_partial_chunk_load_before_the_row() {
    for (shape, workers, complete) in [("16x2560", 512, 0), ("16x3000", 256, 1)] {
        let p = make_with(
            Operator::Rmsnorm,
            DType::Bf16,
            shape,
            LayoutRequest {
                workers,
                pack: 8,
                unroll: 1,
                early_columns: 8,
                ..Default::default()
            },
        );
        assert_eq!(p.early_columns as usize, complete + 1, "{}", p.describe());
        let src = kernel(&p).source;
        let early = src
            .find("// the columns of phase 1's partial chunk")
            .unwrap_or_else(|| panic!("{shape}: no early partial loads"));
        let row_load = src.find("p_x + row_off").unwrap();
        assert!(early < row_load, "{shape}: partial columns after the row");
        // Both partial forms read the early copy, and nothing else loads
        // the partial chunk's weight in the output phase.
        let out = &src[src.find("// ---- phase 1 ----").unwrap()..];
        assert_eq!(out.matches("= lf_ep").count(), 2, "{shape}");
        assert!(!out.contains("p_weight[i0 + e]"), "{shape}");
        assert_eq!(
            src.contains("lf_e1"),
            complete > 0,
            "{shape}: complete chunks' early loads"
        );
    }
}

/// Schedules of every family the mapper can pick for cross entropy with
/// its gradient: one thread per row, rows of a warp's lanes, register
/// rows, streamed re-reads (hinted and batched), packed tiles, shared
/// chunks, prefetched rows, L2 prefetch, clusters, the online normalizer.
const IN_PLACE_FAMILIES: &[(&str, &str)] = &[
    ("64x4096", "W=1 V=1 G=4"),
    ("64x4096", "W=8 V=4 G=4"),
    ("64x4096", "W=32 V=8 G=1"),
    ("64x4099", "W=32 V=4 G=1 online-normalizer"),
    ("64x4096", "W=256 V=8 G=1 registers"),
    ("64x4096", "W=256 V=8 G=1 registers packed-resident"),
    ("64x4096", "W=256 V=8 G=1 registers shared-chunks=1"),
    ("64x4096", "W=256 V=8 G=1 registers prefetch-rows"),
    ("64x4096", "W=256 V=8 G=1 registers l2-prefetch=4"),
    ("64x32000", "W=256 V=8 U=4 G=1 stream reread-hints"),
    ("64x32000", "W=256 V=8 U=4 G=1 stream streaming-hints"),
    ("64x2048", "W=256 V=8 G=1 stream batched-loads"),
    (
        "64x32000",
        "W=256 V=8 U=4 G=1 stream reread-hints unguarded-stores",
    ),
    ("64x32000", "W=1024 V=8 U=2 G=1 stream online-normalizer"),
    ("64x131072", "W=2048 V=8 G=1 registers"),
    (
        "64x131072",
        "W=2048 V=8 G=1 registers relaxed-exit online-normalizer",
    ),
    ("64x128256", "W=4096 V=8 U=2 G=1 stream"),
];

fn in_place(shape: &str, schedule: &str) -> Plan {
    let mut request: LayoutRequest = schedule.parse().unwrap();
    request.in_place = true;
    make_with(Operator::CrossEntropyWithGrad, DType::Bf16, shape, request)
}

/// In place, the logits and dlogits pointers carry no `__restrict__` and
/// no load is `.nc` (both promise the kernel writes nothing it reads);
/// every read of an element another thread owns (the gathered target
/// logit) comes before a barrier of the whole row (block, cluster, or the
/// `__syncwarp` added for a row of one warp) that precedes the first
/// store of dx. Otherwise the kernel is the out-of-place one.
#[test]
fn in_place_kernels_order_every_foreign_read_before_the_stores_over_it() {
    for &(shape, schedule) in IN_PLACE_FAMILIES {
        let p = in_place(shape, schedule);
        let what = format!("{shape} {}", p.describe());
        assert!(p.describe().contains("in-place"), "{what}");
        let k = kernel(&p);
        let src = &k.source;
        assert!(k.name.contains("_ip"), "{what}: {}", k.name);
        assert!(src.contains("const lf_store_t* p_x,"), "{what}");
        assert!(src.contains("lf_store_t* p_dx,"), "{what}");
        assert!(
            src.contains("const long long* __restrict__ p_target"),
            "{what}"
        );
        assert!(!src.contains(".nc"), "{what}");
        let gather = src
            .find("gathered masked sum")
            .expect("the target is gathered");
        let store = src
            .find("p_dx + row_off")
            .or_else(|| src.find("p_dx[row_off"))
            .unwrap_or_else(|| panic!("{what}: no dx store"));
        let between = &src[gather..store];
        let lanes = p.tree.lanes;
        let ordered = [
            "__syncthreads()",
            "lf_cluster_sync()",
            "__syncwarp(lf_mask)",
        ]
        .iter()
        .any(|b| between.contains(b));
        assert!(
            ordered || lanes == 1,
            "{what}: no barrier between gather and stores"
        );
        assert_eq!(
            src.contains("__syncwarp(lf_mask)"),
            lanes > 1 && p.tree.warps == 1 && p.groups_per_row == 1,
            "{what}"
        );
        // Out of place: the same kernel but for those lines.
        let mut out = p.clone();
        out.in_place = false;
        let plain = kernel(&out).source;
        let strip = |s: &str| {
            s.lines()
                .filter(|l| !l.contains("__syncwarp(lf_mask)"))
                .map(|l| l.replace(" __restrict__", "").replace(".nc", ""))
                .map(|l| l.replace("_ip", "").replace(" in-place", ""))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(strip(src), strip(&plain), "{what}");
    }
}

/// The in-place kernel of the golden cross_entropy_with_grad plan and of
/// a row of one warp (the `__syncwarp` before the stores).
#[test]
fn golden_cross_entropy_with_grad_in_place() {
    insta::assert_snapshot!(
        "golden_cross_entropy_with_grad_bf16_in_place",
        golden(&in_place("64x4096", "W=256 V=8 U=1 G=1"))
    );
    insta::assert_snapshot!(
        "golden_cross_entropy_with_grad_bf16_w32_in_place",
        golden(&in_place("64x4096", "W=32 V=8 U=1 G=1"))
    );
}

/// The caller's eps is the only eps in a layernorm kernel: its fast path's
/// and its cold path's (which once wrote the default as a literal).
#[test]
fn regression_the_cold_path_wrote_the_default_eps() {
    for op in [Operator::Layernorm, Operator::ResidualLayernorm] {
        let mut problem = Problem::operator(
            op,
            OperatorOptions::default(),
            DType::Bf16,
            "64x4096".parse().unwrap(),
        );
        assert!(problem.program.set_norm_eps(0.25));
        let p = plan(&problem, &Target::h200(), &LayoutRequest::default()).unwrap();
        assert!(p.cold_path(), "{op}: {}", p.describe());
        let source = kernel(&p).source;
        assert!(source.contains("0.25f"), "{op}");
        assert!(
            !source.contains(&format!("{:?}f", lanefold_ir::LAYERNORM_EPS)),
            "{op}: the default eps is in the source"
        );
    }
}

/// Aligned packs on a misaligned row (1001 elements, V=8): each row reads
/// from `row_off - lf_s`, its first and last chunks guarded pack by pack
/// (a vector where the pack lies in the row), the chunks between one
/// vector access a pack, loads and stores alike.
#[test]
fn golden_softmax_bf16_w32_v8_aligned_packs() {
    let p = make_with(
        Operator::Softmax,
        DType::Bf16,
        "37x1001",
        LayoutRequest {
            workers: 32,
            pack: 8,
            unroll: 1,
            aligned_packs: true,
            ..Default::default()
        },
    );
    assert!(p.aligned_packs, "{}", p.describe());
    // 1001 + 7 elements at most: four chunks of 256, each with slots.
    assert_eq!(p.slot_bound, 32);
    let k = kernel(&p);
    let body = &k.source[k.source.find("__global__").unwrap()..];
    assert!(body.contains("const int lf_s = (int)(row_off & (LF_V - 1));"));
    assert!(body.contains("const int i0 = (c * LF_W + w) * LF_V - lf_s;"));
    // Chunks 0 and 3 guarded in each of the three phases, 1 and 2 looped.
    assert_eq!(
        body.matches("whole packs as vectors, the row's ends guarded")
            .count(),
        6
    );
    assert_eq!(body.matches("for (int c = 1; c < LF_FULL; ++c)").count(), 3);
    assert!(body.contains("if ((unsigned)(i0 + e) < (unsigned)LF_N) {"));
    assert!(
        !body.contains("lf_widen(p_x[row_off + i0 + e]);"),
        "every unguarded read is a vector"
    );
    insta::assert_snapshot!(golden(&p));
}

/// Aligned packs and plans that leave them out: rows already aligned and
/// scalar packs are unmarked; the same request without the token gives
/// scalar accesses for every pack of a misaligned row.
#[test]
fn aligned_packs_apply_only_to_misaligned_rows_of_vector_packs() {
    let request = |pack| LayoutRequest {
        workers: 32,
        pack,
        aligned_packs: true,
        ..Default::default()
    };
    let aligned = make_with(Operator::Softmax, DType::Bf16, "4x1024", request(8));
    assert!(!aligned.aligned_packs);
    let scalar = make_with(Operator::Softmax, DType::Bf16, "4x1001", request(1));
    assert!(!scalar.aligned_packs);
    let plain = make(Operator::Softmax, DType::Bf16, "4x1001", 32, 8, 1);
    assert!(!kernel(&plain).source.contains("lf_s ="));
    assert_eq!(plain.slot_bound, 3 * 8 + 8);
}

/// Misaligned rows spanning a cluster read aligned packs too: the groups
/// share the row's shift, each worker's chunk at `(c * W + w) * V - lf_s`
/// with `w` counted across the cluster. Before, aligned packs stayed
/// within one group, and a cluster's V=4 packs of such rows were read
/// element by element.
#[test]
fn misaligned_rows_spanning_a_cluster_read_aligned_packs() {
    let p = make_with(
        Operator::Softmax,
        DType::F32,
        "5x40003",
        LayoutRequest {
            workers: 4096,
            pack: 4,
            unroll: 4,
            cluster_group_threads: 512,
            push_cluster_reduce: true,
            aligned_packs: true,
            ..Default::default()
        },
    );
    assert!(p.aligned_packs && p.groups_per_row == 8, "{}", p.describe());
    let body = kernel(&p).source;
    assert!(body.contains("const int w = rank * 512 + tid;"));
    assert!(body.contains("const int i0 = (c * LF_W + w) * LF_V - lf_s; // the row's element"));
    assert!(body.contains("reinterpret_cast<const uint4*>(p_x + row_off + i0)"));
}

/// `plain`'s schedule with aligned packs on `shape` (rows off 16 bytes),
/// and its request.
fn shifted(op: Operator, dtype: DType, shape: &str, plain: &Plan) -> (Plan, LayoutRequest) {
    let request = LayoutRequest {
        aligned_packs: true,
        ..plain.schedule()
    };
    let p = make_with(op, dtype, shape, request);
    assert!(p.aligned_packs, "{}", p.describe());
    (p, request)
}

/// A column cannot follow a row's shift, but the shift (`r * N mod V`) is
/// a multiple of `gcd(N, V)`: an aligned-packs norm reads its weight and
/// bias that many elements an access where they make a word (two bf16 of
/// rows of 4k+2, four of 8k+4, two f32 of 4k+2), element by element where
/// they do not (odd rows, and bf16 pairs of no word: never).
#[test]
fn shifted_columns_are_read_gcd_of_n_and_v_elements_an_access() {
    for (dtype, n, v, access) in [
        (DType::Bf16, 1002u32, 8u32, Some("unsigned")),
        (DType::Bf16, 1004, 8, Some("uint2")),
        (DType::F32, 1002, 4, Some("uint2")),
        (DType::Bf16, 1001, 8, None),
        (DType::F32, 1001, 4, None),
    ] {
        let shape = format!("37x{n}");
        let plain = make(Operator::Rmsnorm, dtype, &shape, 32, v, 1);
        let (p, _) = shifted(Operator::Rmsnorm, dtype, &shape, &plain);
        let src = kernel(&p).source;
        let per_element = src.contains("[e] = lf_widen(p_weight[i0 + e]); // column");
        match access {
            Some(ty) => {
                assert!(!per_element, "{dtype:?} {n}: {src}");
                let elems = (1..=v)
                    .rev()
                    .find(|&g| n.is_multiple_of(g) && v.is_multiple_of(g))
                    .unwrap();
                assert!(
                    src.contains(&format!(
                        "const {ty}* q = reinterpret_cast<const {ty}*>(p_weight + i0); // column, {elems} elements an access"
                    )),
                    "{dtype:?} {n}: {src}"
                );
            }
            None => assert!(per_element, "{dtype:?} {n}: {src}"),
        }
    }
    let plain = make(Operator::Layernorm, DType::Bf16, "37x1002", 32, 8, 1);
    let (p, _) = shifted(Operator::Layernorm, DType::Bf16, "37x1002", &plain);
    insta::assert_snapshot!(golden(&p));
}

/// An aligned-pack kernel had the name of the same layout's plain one,
/// so `compile-check --cubin-dir` wrote both to one file.
#[test]
fn regression_aligned_packs_kernels_shared_the_plain_kernels_name() {
    let plain = make(Operator::Softmax, DType::Bf16, "4x1001", 32, 8, 1);
    let (shifted, _) = shifted(Operator::Softmax, DType::Bf16, "4x1001", &plain);
    assert_eq!(kernel_name(&shifted), format!("{}_ap", kernel_name(&plain)));
}

/// NVVM split an aligned-pack kernel's `q[k] = a` vector stores into
/// scalar ones (the row's first pack stores the same addresses element by
/// element), so softmax f32 4096x30522 wrote its rows at 1.6 TB/s. Its
/// whole packs now store through `st.global.v4`, hinted or not, in every
/// storage type; plain kernels keep the C store the compiler vectorizes.
#[test]
fn regression_aligned_pack_stores_were_split_into_scalar_stores() {
    let cases = [
        (DType::F32, "4x30522", "4x30524", 4),
        (DType::Bf16, "4x1001", "4x1008", 8),
    ];
    for (dtype, shape, aligned_rows, pack) in cases {
        let plain = make(Operator::Softmax, dtype, shape, 512, pack, 1);
        let (aligned, request) = shifted(Operator::Softmax, dtype, shape, &plain);
        let src = kernel(&aligned).source;
        assert!(src.contains("st.global.v4.u32"), "{src}");
        assert!(src.contains("lf_st(q + 0, a);"), "{src}");
        assert!(!src.contains("q[0] = a;"), "{src}");
        let hinted = make_with(
            Operator::Softmax,
            dtype,
            shape,
            LayoutRequest {
                streaming_hints: true,
                ..request
            },
        );
        assert!(kernel(&hinted).source.contains("lf_st_cs(q + 0, a);"));
        let plain = make(Operator::Softmax, dtype, aligned_rows, 512, pack, 1);
        let src = kernel(&plain).source;
        assert!(
            src.contains("q[0] = a;") && !src.contains("lf_st("),
            "{src}"
        );
    }
    // A kernel without row outputs carries no store helper.
    let loss = make(Operator::CrossEntropy, DType::Bf16, "4x1001", 32, 8, 1);
    let (aligned, _) = shifted(Operator::CrossEntropy, DType::Bf16, "4x1001", &loss);
    assert!(!kernel(&aligned).source.contains("lf_st("));
}

/// The norms in aligned packs: x and the outputs move in whole packs,
/// but weight and bias (one row of columns every row reads at its own
/// shift) are read element by element on these odd rows (in
/// `gcd(N, V)`-element accesses on even ones); the cold path writes each
/// worker's elements of the shifted layout, the row's shift passed in.
#[test]
fn golden_layernorm_bf16_w32_v8_aligned_packs() {
    let plain = make(Operator::Layernorm, DType::Bf16, "37x1001", 32, 8, 1);
    assert!(plain.cold_path());
    let (p, _) = shifted(Operator::Layernorm, DType::Bf16, "37x1001", &plain);
    let src = kernel(&p).source;
    for column in ["weight", "bias"] {
        assert!(
            src.contains(&format!("[e] = lf_widen(p_{column}[i0 + e]); // column")),
            "{column}: {src}"
        );
    }
    assert!(
        src.contains("reinterpret_cast<const uint4*>(p_x + row_off + i0)"),
        "{src}"
    );
    assert!(src.contains("int w, int s, float4 st)"), "{src}");
    assert!(
        src.contains("for (int i = w * LF_V - s; i < LF_N;"),
        "{src}"
    );
    assert!(src.contains("if (i < 0) continue;"), "{src}");
    assert!(
        src.contains("lf_w, (int)(lf_off & (LF_V - 1)), lf_st);"),
        "{src}"
    );
    // The plain kernel's cold path is as before.
    let plain_src = kernel(&plain).source;
    assert!(plain_src.contains("for (int i = w * LF_V; i < LF_N;"));
    assert!(!plain_src.contains("int s,"));
    insta::assert_snapshot!(golden(&p));
}

/// A row within the group limit split into groups (`split-groups`,
/// Quack's decode cross-entropy shape): 512 workers as a pushed cluster of
/// two groups of 256, each launched with 256 threads.
#[test]
fn golden_cross_entropy_f32_w512_in_two_groups_of_256() {
    let p = make_with(
        Operator::CrossEntropy,
        DType::F32,
        "56x45000",
        LayoutRequest {
            workers: 512,
            pack: 4,
            unroll: 4,
            cluster_group_threads: 256,
            split_groups: true,
            push_cluster_reduce: true,
            online_normalizer: true,
            ..Default::default()
        },
    );
    assert_eq!((p.groups_per_row, p.threads_per_group), (2, 256));
    let k = kernel(&p);
    assert_eq!(k.name, "lf_cross_entropy_f32_w512_v4_u4_g1_c2_pr_on");
    assert!(k.source.contains("__launch_bounds__(256) "));
    insta::assert_snapshot!(golden(&p));
}

/// Unguarded stores: with one row a group, a group past the last row
/// returns before anything else, and no store then waits on a row guard
/// the compiler would sink the chunk's load into. Several rows a group
/// and clusters keep the guard (a group's rows end apart; a row's groups
/// meet at cluster barriers), unmarked.
#[test]
fn golden_cross_entropy_backward_bf16_w32_v8_aligned_packs_unguarded_stores() {
    let request = |workers, rows_per_group, cluster_group_threads| LayoutRequest {
        workers,
        pack: 8,
        unroll: 2,
        rows_per_group,
        cluster_group_threads,
        aligned_packs: true,
        unguarded_stores: true,
        ..Default::default()
    };
    let op = Operator::CrossEntropyBackward;
    let p = make_with(op, DType::Bf16, "37x1001", request(32, 1, 0));
    assert!(p.unguarded_stores, "{}", p.describe());
    assert!(
        p.describe().contains("unguarded-stores"),
        "{}",
        p.describe()
    );
    let k = kernel(&p);
    assert!(k.name.ends_with("_ug_ap"), "{}", k.name);
    let body = &k.source[k.source.find("__global__").unwrap()..];
    let exit = body
        .find("if (row >= rows) return;")
        .expect("the early exit");
    assert!(exit < body.find("lf_ld").unwrap_or(body.len()));
    assert!(body.contains("const bool row_ok = true;"));
    assert!(!body.contains("row < rows"));
    insta::assert_snapshot!(golden(&p));

    for (shape, unguarded) in [
        (
            "37x1001",
            make_with(op, DType::Bf16, "37x1001", request(32, 2, 0)),
        ),
        (
            "37x16388",
            make_with(op, DType::Bf16, "37x16388", request(2048, 1, 256)),
        ),
    ] {
        assert!(
            !unguarded.unguarded_stores,
            "{shape}: {}",
            unguarded.describe()
        );
        let source = kernel(&unguarded).source;
        assert!(source.contains("row < rows"), "{shape}");
        assert!(!source.contains("return; // one row a group"), "{shape}");
    }
}

/// Recomputed derived tiles: a register layernorm's output phase reads the
/// mean its variance phase also subtracted through an opaque copy, so the
/// centred row is recomputed from the resident tile, not kept beside it.
/// Softmax's phases take exp, so it keeps its kernel; a streamed plan is
/// unmarked.
#[test]
fn golden_layernorm_f32_w32_v4_recompute_derived() {
    let request = |residency| LayoutRequest {
        workers: 32,
        pack: 4,
        unroll: 1,
        residency,
        recompute_derived: true,
        no_cold_path: true,
        ..Default::default()
    };
    let p = make_with(
        Operator::Layernorm,
        DType::F32,
        "37x1001",
        request(ResidencyRequest::Registers),
    );
    assert!(p.recompute_derived, "{}", p.describe());
    let k = kernel(&p);
    assert!(k.name.ends_with("_rd"), "{}", k.name);
    let phase2 = &k.source[k.source.find("// ---- phase 2 ----").unwrap()..];
    let copy = phase2
        .find("asm(\"\" : \"+r\"(h3_bits));")
        .expect("the mean's copy");
    assert!(copy < phase2.find("const float t4 = h3;").expect("the copy read"));
    assert!(
        !phase2.contains("= s3;\n"),
        "phase 2 reads the mean only through h3"
    );
    let phase1 = &k.source[k.source.find("// ---- phase 1 ----").unwrap()..];
    assert!(phase1[..phase1.find("// ---- phase 2").unwrap()].contains("const float t4 = s3;"));
    insta::assert_snapshot!(golden(&p));

    let streamed = make_with(
        Operator::Layernorm,
        DType::F32,
        "37x1001",
        request(ResidencyRequest::Stream),
    );
    assert!(!streamed.recompute_derived);
    let softmax = make_with(
        Operator::Softmax,
        DType::F32,
        "37x1001",
        request(ResidencyRequest::Registers),
    );
    assert!(softmax.recompute_derived);
    let plain = LayoutRequest {
        recompute_derived: false,
        ..request(ResidencyRequest::Registers)
    };
    let softmax_plain = make_with(Operator::Softmax, DType::F32, "37x1001", plain);
    assert_eq!(
        kernel(&softmax)
            .source
            .replace("_rd", "")
            .replace(" recompute-derived", ""),
        kernel(&softmax_plain).source,
        "softmax's phases take exp: nothing hidden"
    );
}
