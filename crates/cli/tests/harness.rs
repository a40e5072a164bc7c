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

/// `run_layouts` shares one set of inputs and one float64 reference
/// between layouts: each outcome must be what `run_case` gives that
/// layout alone, bit for bit, with the same verdict.
#[test]
fn layouts_on_shared_inputs_equal_each_layout_run_alone() {
    use lanefold::run_layouts;
    let case = Case {
        op: Operator::Sum,
        dtype: DType::F32,
        shape: "7x1000".parse().unwrap(),
        request: LayoutRequest::default(),
        seed: 11,
    };
    let requests = [
        LayoutRequest {
            workers: 32,
            pack: 1,
            ..Default::default()
        },
        LayoutRequest {
            workers: 128,
            pack: 8,
            ..Default::default()
        },
    ];
    let options = CodegenOptions::default();
    let together = run_layouts(&Backend::Cpu, &case, &requests, &options).unwrap();
    assert_eq!(together.len(), 2);
    for (request, shared) in requests.iter().zip(&together) {
        let alone = run_case(
            &Backend::Cpu,
            &Case {
                request: *request,
                ..case
            },
            &options,
        )
        .unwrap();
        assert_eq!(shared.plan.describe(), alone.plan.describe());
        assert_eq!(shared.outputs, alone.outputs);
        assert_eq!(shared.validation.pass, alone.validation.pass);
        assert_eq!(
            shared.validation.worst_rel_err(),
            alone.validation.worst_rel_err()
        );
    }
    // Two layouts that sum in different orders: the shared path really
    // ran both (their bits differ somewhere).
    assert!(
        together[0].outputs != together[1].outputs,
        "both layouts gave the same sums"
    );
    // A refused layout refuses the whole comparison, naming it.
    let refused = LayoutRequest {
        workers: 3,
        ..Default::default()
    };
    assert!(run_layouts(&Backend::Cpu, &case, &[requests[0], refused], &options).is_err());
}
