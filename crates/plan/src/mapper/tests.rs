use super::*;
use crate::enumerate;
use crate::testing::{automatic, problem, typed};

#[test]
fn enumerate_is_the_cartesian_product() {
    let p = problem(Operator::Rmsnorm, "64x4096");
    let c = enumerate(
        &p,
        &Target::h200(),
        &LayoutRequest::default(),
        &[0, 32, 128, 256],
        &[1, 2, 4],
        &[1],
    );
    assert_eq!(c.len(), 12);
    assert!(c.iter().all(|c| c.outcome.is_ok()));
}

#[test]
fn a_pinned_request_plans_to_the_same_plan_with_only_the_promise_added() {
    let t = Target::h200();
    let auto = automatic();
    for (op, dtype, shape) in [
        (Operator::Rmsnorm, DType::Bf16, "4096x131072"),
        (Operator::Rmsnorm, DType::Bf16, "32768x4096"),
        (Operator::Softmax, DType::F32, "1024x262144"),
        (Operator::Layernorm, DType::Bf16, "1024x4096"),
        (Operator::Sum, DType::F32, "17x257"),
        (Operator::CrossEntropy, DType::Bf16, "4096x32768"),
    ] {
        let p = typed(op, dtype, shape);
        let chosen = plan(&p, &t, &auto).unwrap();
        let same = plan(&p, &t, &chosen.pinned_request(&auto, 0)).unwrap();
        assert_eq!(same.describe(), chosen.describe(), "{op} {dtype} {shape}");
        let threads = chosen.threads_per_group;
        let groups = (t.max_threads_per_multiprocessor / threads).min(2);
        let promised = plan(&p, &t, &chosen.pinned_request(&auto, groups)).unwrap();
        assert_eq!(promised.layout, chosen.layout, "{op} {dtype} {shape}");
        assert_eq!(promised.min_groups_per_multiprocessor, Some(groups));
        assert_eq!(
            promised
                .describe()
                .replace(&format!(" occupancy={groups}"), ""),
            chosen.describe(),
            "{op} {dtype} {shape}"
        );
    }
}

/// The PyTorch package sets its caller's eps in the problem; a norm's
/// program is rebuilt whenever it is planned (its cold path in or out, as
/// the CUDA runtime plans it again), and the rebuilt form lost the eps:
/// `layer_norm(x, w, b, eps=0.25)` ran with 1e-5 on the GPU.
#[test]
fn regression_a_norm_planned_again_lost_the_callers_eps() {
    for op in [
        Operator::Rmsnorm,
        Operator::Layernorm,
        Operator::ResidualLayernorm,
    ] {
        for dtype in [lanefold_ir::DType::F32, lanefold_ir::DType::Bf16] {
            let mut p = typed(op, dtype, "64x4096");
            assert!(p.program.set_norm_eps(0.25));
            let first = plan(&p, &Target::h200(), &LayoutRequest::default()).unwrap();
            assert_eq!(first.problem.program.norm_eps(), Some(0.25), "{op}");
            let edits: [fn(&mut LayoutRequest); 3] = [
                |r| r.no_cold_path = true,
                |r| r.one_pass_moments = !r.one_pass_moments,
                |r| r.fused_output = true,
            ];
            for edit in edits {
                let mut request = first.schedule();
                edit(&mut request);
                let again = plan(&first.problem, &Target::h200(), &request).unwrap();
                assert_eq!(
                    again.problem.program.norm_eps(),
                    Some(0.25),
                    "{op} {dtype} {request}"
                );
            }
        }
    }
}
