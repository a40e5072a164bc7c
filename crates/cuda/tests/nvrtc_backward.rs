//! Needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh). Every
//! backward operator's kernel (and the lse-saving forward's) compiles for the H200 without spilling, in
//! its default plan and in a narrow explicit one; so do the column-gradient
//! and in-place scale kernels.

use lanefold_codegen::CodegenOptions;
use lanefold_cuda::compile_offline_all;
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, LayoutRequest, Problem, Target};

#[test]
#[ignore = "needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh)"]
fn nvrtc_compiles_every_backward_kernel_without_spills() {
    let mut plans = vec![];
    // With the forward that saves cross entropy's lse.
    for op in Operator::training() {
        for weight in [true, false] {
            for dtype in [DType::F32, DType::Bf16, DType::F16] {
                for (shape, workers, pack) in [
                    ("1x127", 0, 0),
                    ("1024x4096", 0, 0),
                    ("4x32768", 0, 0),
                    ("4x131072", 0, 0),
                    ("17x257", 32, 1),
                ] {
                    let problem = Problem::operator(
                        op,
                        OperatorOptions { weight, bias: true },
                        dtype,
                        shape.parse().unwrap(),
                    );
                    let request = LayoutRequest {
                        workers,
                        pack,
                        ..Default::default()
                    };
                    plans.push(plan(&problem, &Target::h200(), &request).unwrap());
                }
            }
        }
    }
    let compiled = compile_offline_all(&plans, &CodegenOptions::default(), "sm_90");
    for (p, c) in plans.iter().zip(compiled) {
        let c = c.unwrap_or_else(|e| panic!("{}: {e}", p.describe()));
        assert!(!c.cubin.is_empty(), "{}", c.kernel);
        assert_eq!(
            c.ptxas.spill_store_bytes.unwrap_or(0),
            0,
            "{}: {}",
            c.kernel,
            c.log
        );
    }
}

/// The norms' column-gradient kernels (first pass and combine) compile in
/// every dtype, for one group, a partial last group and a long row.
#[test]
#[ignore = "needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh)"]
fn nvrtc_compiles_the_column_gradient_kernels() {
    use lanefold_codegen::{column_grad_kernels, ColumnGradKind};
    use lanefold_cuda::compile_kernel_offline;
    for kind in [ColumnGradKind::Rmsnorm, ColumnGradKind::Layernorm] {
        for dtype in [DType::F32, DType::Bf16, DType::F16] {
            for (rows, n) in [(1, 1), (70, 300), (4096, 4096), (3, 262144)] {
                for k in column_grad_kernels(kind, dtype, rows, n, 1e-5).unwrap() {
                    let c = compile_kernel_offline(&k, &CodegenOptions::default(), "sm_90")
                        .unwrap_or_else(|e| panic!("{}: {e}", k.name));
                    assert!(!c.cubin.is_empty(), "{}", c.kernel);
                    assert_eq!(c.ptxas.spill_store_bytes.unwrap_or(0), 0, "{}", c.log);
                }
            }
        }
    }
}

/// The in-place scale of cross entropy's forward-written gradient
/// compiles in every dtype, with and without a tail past its packs.
#[test]
#[ignore = "needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh)"]
fn nvrtc_compiles_the_scale_kernels() {
    use lanefold_codegen::scale_unless_one_kernel;
    use lanefold_cuda::compile_kernel_offline;
    for dtype in [DType::F32, DType::Bf16, DType::F16] {
        for (rows, n) in [(1, 1), (7, 9), (8192, 128256)] {
            let k = scale_unless_one_kernel(dtype, rows, n).unwrap();
            let c = compile_kernel_offline(&k, &CodegenOptions::default(), "sm_90")
                .unwrap_or_else(|e| panic!("{}: {e}", k.name));
            assert!(!c.cubin.is_empty(), "{}", c.kernel);
            assert_eq!(c.ptxas.spill_store_bytes.unwrap_or(0), 0, "{}", c.log);
        }
    }
}
