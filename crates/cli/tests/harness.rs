//! The shared harness on the CPU: the same helper runs on CUDA in the
//! device selftest.

use lanefold::selftest::{
    batch_invariance_checks, exact_sum_checks, layout_matrix, refusal_checks, run_cases, Report,
};
use lanefold::{run_case, Backend, Case};
use lanefold_codegen::CodegenOptions;
use lanefold_ir::{DType, Operator};
use lanefold_plan::LayoutRequest;

#[test]
fn layout_matrix_has_the_issue_size() {
    assert_eq!(layout_matrix(DType::F32).len(), 6 * 4 * 3 * 8 * 2);
}

#[test]
fn refusals_and_exact_sums_pass_on_the_cpu() {
    let mut r = Report::default();
    refusal_checks(&mut r);
    exact_sum_checks(&Backend::Cpu, &mut r);
    assert_eq!(r.failed, 0, "{}", r.summary());
    assert!(r.passed >= 4 + 4, "{}", r.summary());
}

#[test]
fn a_slice_of_the_matrix_passes_in_every_dtype() {
    for dtype in [DType::F32, DType::Bf16, DType::F16] {
        let cases: Vec<Case> = layout_matrix(dtype).into_iter().step_by(37).collect();
        let mut r = Report::default();
        run_cases(&Backend::Cpu, &cases, &mut r);
        assert_eq!(r.failed, 0, "{dtype}: {}", r.summary());
        assert_eq!(r.passed, cases.len());
    }
}

#[test]
fn long_rows_span_clusters_and_stay_valid_on_the_cpu() {
    let case = Case {
        op: Operator::CrossEntropy,
        dtype: DType::Bf16,
        shape: "2x262144".parse().unwrap(),
        request: LayoutRequest::default(),
        seed: 5,
    };
    let out = run_case(&Backend::Cpu, &case, &CodegenOptions::default()).unwrap();
    assert!(out.plan.groups_per_row > 1, "{}", out.plan.describe());
    assert!(out.validation.pass, "{:?}", out.validation);
}

#[test]
fn rows_are_bit_identical_alone_among_7_and_among_4096() {
    let mut r = Report::default();
    batch_invariance_checks(&Backend::Cpu, &[127], &mut r);
    assert_eq!(r.failed, 0, "{}", r.summary());
    assert_eq!(r.passed, 12);
}

#[test]
fn model_mapping_plans_run_valid_on_the_cpu() {
    use lanefold_plan::MapperPolicy;
    for op in Operator::SIX {
        for (shape, dtype) in [("5x257", DType::Bf16), ("3x4103", DType::F32)] {
            let case = Case {
                op,
                dtype,
                shape: shape.parse().unwrap(),
                request: LayoutRequest {
                    mapper: MapperPolicy::Model,
                    ..Default::default()
                },
                seed: 9,
            };
            let out = run_case(&Backend::Cpu, &case, &CodegenOptions::default()).unwrap();
            assert!(out.validation.pass, "{op} {shape}: {:?}", out.validation);
        }
    }
}
