//! Needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh). A cubin's
//! own record of its kernel's registers and frame agrees with ptxas' log,
//! so the runtime can decide a norm's cold path where the log is empty.

use lanefold_codegen::CodegenOptions;
use lanefold_cuda::{compile_offline_all, kernel_resources, PtxasReport};
use lanefold_ir::{DType, Operator, OperatorOptions};
use lanefold_plan::{plan, LayoutRequest, Problem, Target};

#[test]
#[ignore = "needs NVRTC (CI: LD_LIBRARY_PATH from scripts/fetch-nvrtc.sh)"]
fn nvrtc_cubin_registers_and_frames_agree_with_the_ptxas_log() {
    let mut plans = vec![];
    for op in [Operator::Softmax, Operator::Layernorm, Operator::Rmsnorm] {
        for dtype in [DType::F32, DType::Bf16] {
            for (shape, schedule) in [
                ("8x1000", "auto"),
                ("4096x32768", "auto"),
                // Spills 8 bytes per thread (a frame) on the H200's NVRTC.
                (
                    "4x32768",
                    "W=1024 V=4 stream reread-hints occupancy-cap=1 occupancy=1 batched-loads",
                ),
            ] {
                let problem = Problem::operator(
                    op,
                    OperatorOptions::default(),
                    dtype,
                    shape.parse().unwrap(),
                );
                let request: LayoutRequest = schedule.parse().unwrap();
                plans.push(plan(&problem, &Target::h200(), &request).unwrap());
            }
        }
    }
    let mut framed = 0;
    for (p, c) in plans.iter().zip(compile_offline_all(
        &plans,
        &CodegenOptions::default(),
        "sm_90",
    )) {
        let c = c.unwrap_or_else(|e| panic!("{}: {e}", p.describe()));
        let from_log = PtxasReport::parse(&c.log);
        let r = kernel_resources(&c.cubin, &c.kernel)
            .unwrap_or_else(|| panic!("{}: no record", c.kernel));
        assert_eq!(
            Some(r.registers),
            from_log.registers,
            "{}: {}",
            c.kernel,
            c.log
        );
        // The log's first "Function properties" entry is the kernel's own.
        let kernel_line = c
            .log
            .lines()
            .skip_while(|l| {
                !l.trim_end()
                    .ends_with(&format!("Function properties for {}", c.kernel))
            })
            .nth(1)
            .map(PtxasReport::parse)
            .unwrap_or_default();
        assert_eq!(
            Some(r.frame_bytes),
            kernel_line.stack_bytes,
            "{}: {}",
            c.kernel,
            c.log
        );
        framed += (r.frame_bytes > 0) as usize;
    }
    assert!(
        framed > 0,
        "no kernel with a frame: the frame check checked nothing"
    );
}
