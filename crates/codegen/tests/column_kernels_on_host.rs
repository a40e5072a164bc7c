//! The column-gradient kernels run on the host (`host`): the partial-sum
//! kernel, then the combining one, must give the CPU's column sums bit for
//! bit, in f32 and bf16. Skipped without a C++20 compiler.

mod host;

use host::{param_buffers, runs_on_the_host, Host};
use lanefold_codegen::{column_grad_kernels, column_partials_len, ColumnGradKind};
use lanefold_cpu::columns::column_grads;
use lanefold_cpu::{Buffers, Tensor};
use lanefold_ir::{DType, Operator};

/// dweight and dbias (empty for rmsnorm) from the two kernels.
fn host_run(
    host: &Host,
    kind: ColumnGradKind,
    dtype: DType,
    (rows, n): (usize, usize),
    eps: f32,
    inputs: &Buffers,
) -> Vec<Tensor> {
    let [p, c] = column_grad_kernels(kind, dtype, rows, n, eps).unwrap();
    assert!(runs_on_the_host(&p) && runs_on_the_host(&c));
    let partials = vec![0u8; 4 * column_partials_len(kind, rows, n)];
    let buffers = param_buffers(&p, rows, n, |name| match name {
        "partials" => partials.clone(),
        name => inputs[name].as_bytes(),
    });
    let id = format!("{kind:?}-{dtype:?}-{rows}x{n}");
    let back = host.run(&format!("{id}-p"), &p, dtype, &buffers).unwrap();
    let at = p.params.iter().position(|q| q.name == "partials").unwrap();
    let partials = &back[at];
    let column = inputs["x"].select_rows(n, &[0]);
    let buffers = param_buffers(&c, rows, n, |name| match name {
        "partials" => partials.clone(),
        _ => column.as_bytes(),
    });
    let back = host.run(&format!("{id}-c"), &c, dtype, &buffers).unwrap();
    c.params
        .iter()
        .zip(back)
        .filter(|(q, _)| q.name == "dweight" || q.name == "dbias")
        .map(|(_, b)| {
            let mut t = column.clone();
            t.copy_from_bytes(&b);
            t
        })
        .collect()
}

#[test]
fn the_column_kernels_give_the_cpus_column_sums_bit_for_bit() {
    let Some(host) = Host::new("colgrad") else {
        eprintln!("SKIPPED: no C++20 compiler (CXX, else c++)");
        return;
    };
    for (kind, op, eps) in [
        (
            ColumnGradKind::Layernorm,
            Operator::LayernormBackward,
            1e-5f32,
        ),
        (ColumnGradKind::Rmsnorm, Operator::RmsnormBackward, 1e-6),
    ] {
        // One group, a partial last group, several column stripes.
        for (rows, n) in [(1, 1), (70, 300), (33, 517)] {
            for dtype in [DType::F32, DType::Bf16] {
                let values = |seed: u32| -> Tensor {
                    let v = (0..rows * n).map(|i| {
                        ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 4001) as f32
                            / 1000.0
                            - 2.0
                    });
                    match dtype {
                        DType::Bf16 => Tensor::Bf16(v.map(half::bf16::from_f32).collect()),
                        _ => Tensor::F32(v.collect()),
                    }
                };
                let inputs =
                    Buffers::from([("x".to_string(), values(1)), ("dy".to_string(), values(7))]);
                let want = column_grads(op, &inputs, rows, n, eps, dtype).unwrap();
                let got = host_run(&host, kind, dtype, (rows, n), eps, &inputs);
                for (k, name) in ["dweight", "dbias"].iter().enumerate() {
                    let Some(w) = want.get(*name) else { continue };
                    assert!(
                        w.same_bits(&got[k]),
                        "{kind:?} {dtype:?} {rows}x{n} {name}: {:?} against {:?}",
                        (0..n.min(4)).map(|j| got[k].get(j)).collect::<Vec<_>>(),
                        (0..n.min(4)).map(|j| w.get(j)).collect::<Vec<_>>()
                    );
                }
            }
        }
    }
}
