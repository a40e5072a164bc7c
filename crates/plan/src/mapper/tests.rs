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
