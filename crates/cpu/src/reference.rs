//! The float64 reference: each operator written plainly, independent of
//! the IR, the layout and the executor.

use crate::data::{expected_len, Buffers};
use lanefold_ir::{Operator, OperatorOptions, IGNORE_INDEX};
use lanefold_plan::Problem;
use rayon::prelude::*;
use std::collections::BTreeMap;

/// One output's float64 values, and the magnitude its error is measured
/// against: |value| for well-conditioned outputs, the sum of |x| for a sum
/// (the forward-error bound of any summation order scales with it, so a row
/// whose sum cancels to near zero is not judged by its tiny result).
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    pub values: Vec<f64>,
    /// None: |values| (kept implicit so large outputs are not copied).
    pub scale: Option<Vec<f64>>,
}

pub type Reference = BTreeMap<String, Expected>;

/// A norm's eps as its program holds it: a caller may have set another
/// than the operator's default.
pub(crate) fn norm_eps(problem: &Problem) -> f64 {
    let op = problem.operator_kind().and_then(Operator::default_eps);
    problem.program.norm_eps().or(op).unwrap_or(f32::NAN) as f64
}

/// Reference outputs for `problem`; None for a program that is not one of
/// lanefold's operators.
pub fn reference(problem: &Problem, inputs: &Buffers) -> Option<Reference> {
    let op = problem.operator_kind()?;
    if let Some(forward) = op.forward() {
        let mut out = crate::backward::reference_backward(op, problem, inputs)?;
        if op == Operator::CrossEntropyWithGrad {
            // Its loss is the forward's, judged by the forward's reference.
            let options = OperatorOptions::default();
            let fwd = Problem::operator(forward, options, problem.dtype, problem.shape);
            out.extend(reference(&fwd, inputs)?);
        }
        return Some(out);
    }
    let (rows, n) = (problem.shape.rows, problem.shape.n);
    let dtype = problem.dtype;
    let row = |name: &str, r: usize| -> Vec<f64> {
        let t = &inputs[name];
        (0..n).map(|i| t.get(r * n + i) as f64).collect()
    };
    let column = |name: &str| -> Option<Vec<f64>> { inputs.get(name).map(|t| t.to_f64()) };
    let weight = column("weight");
    let bias = column("bias");
    let eps = norm_eps(problem);
    let layer_norm = |h: &[f64], y: &mut [f64]| {
        let mean = h.iter().sum::<f64>() / n as f64;
        let var = h.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        for (i, y) in y.iter_mut().enumerate() {
            *y = (h[i] - mean) * rstd;
            if let Some(w) = &weight {
                *y *= w[i];
            }
            if let Some(b) = &bias {
                *y += b[i];
            }
        }
    };
    // Row r's values of each output, in output declaration order (a sum's
    // scale after its value), written into that row's slices.
    let row_out = |r: usize, out: &mut [&mut [f64]]| match op {
        Operator::Sum => {
            let x = row("x", r);
            out[0][0] = x.iter().sum();
            out[1][0] = x.iter().map(|v| v.abs()).sum();
        }
        Operator::Softmax => {
            let x = row("x", r);
            let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            for (e, v) in out[0].iter_mut().zip(&x) {
                *e = (v - m).exp();
            }
            let s: f64 = out[0].iter().sum();
            out[0].iter_mut().for_each(|e| *e /= s);
        }
        Operator::Rmsnorm => {
            let x = row("x", r);
            let ms = x.iter().map(|v| v * v).sum::<f64>() / n as f64;
            let inv = 1.0 / (ms + eps).sqrt();
            for (i, y) in out[0].iter_mut().enumerate() {
                *y = x[i] * inv * weight.as_ref().map_or(1.0, |w| w[i]);
            }
        }
        Operator::Layernorm => layer_norm(&row("x", r), out[0]),
        Operator::ResidualLayernorm => {
            let (x, res) = (row("x", r), row("residual", r));
            let (h, y) = out.split_at_mut(1);
            // h is materialized in the storage dtype, as PyTorch does.
            for (i, h) in h[0].iter_mut().enumerate() {
                *h = dtype.round((x[i] + res[i]) as f32) as f64;
            }
            layer_norm(h[0], y[0]);
        }
        Operator::CrossEntropy | Operator::CrossEntropyWithLse => {
            let x = row("x", r);
            let t = inputs["target"].index(r);
            let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = x.iter().map(|v| (v - m).exp()).sum::<f64>().ln() + m;
            out[0][0] = if t == IGNORE_INDEX {
                0.0
            } else {
                lse - x[t as usize]
            };
            if let Some(saved) = out.get_mut(1) {
                // Written on every row, ignored ones too.
                saved[0] = lse;
            }
        }
        Operator::Add => {
            let (x, res) = (row("x", r), row("residual", r));
            for (i, y) in out[0].iter_mut().enumerate() {
                *y = x[i] + res[i];
            }
        }
        _ => unreachable!("backward operators are answered above"),
    };
    // Each output's flat float64 values, rows filled in parallel straight
    // into place: long rows make outputs of 10^8-10^9 values, which per-row
    // vectors copied together afterwards would hold twice.
    let mut widths: Vec<usize> = problem
        .program
        .outputs
        .iter()
        .map(|d| expected_len(d.kind, 1, n))
        .collect();
    if op == Operator::Sum {
        widths.push(1);
    }
    let mut flat: Vec<Vec<f64>> = widths.iter().map(|w| vec![0.0; rows * w]).collect();
    match flat.as_mut_slice() {
        [a] => a
            .par_chunks_mut(widths[0])
            .enumerate()
            .for_each(|(r, a)| row_out(r, &mut [a])),
        [a, b] => a
            .par_chunks_mut(widths[0])
            .zip(b.par_chunks_mut(widths[1]))
            .enumerate()
            .for_each(|(r, (a, b))| row_out(r, &mut [a, b])),
        _ => return None,
    }
    let scale = (op == Operator::Sum).then(|| flat.pop().expect("the sum's scale"));
    let mut out = Reference::new();
    for (decl, values) in problem.program.outputs.iter().zip(flat) {
        out.insert(
            decl.name.clone(),
            Expected {
                values,
                scale: scale.clone(),
            },
        );
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Tensor;
    use lanefold_ir::{DType, OperatorOptions, LAYERNORM_EPS, RMSNORM_EPS};

    fn run(op: Operator, dtype: DType, shape: &str, inputs: &[(&str, Tensor)]) -> Reference {
        let problem = Problem::operator(
            op,
            OperatorOptions::default(),
            dtype,
            shape.parse().unwrap(),
        );
        let inputs: Buffers = inputs
            .iter()
            .map(|(k, t)| (k.to_string(), t.clone()))
            .collect();
        reference(&problem, &inputs).unwrap()
    }

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{got:?} against {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                "{got:?} against {want:?}"
            );
        }
    }

    /// Each operator's float64 values on rows worked by hand, every row
    /// landing in its own place of the flat outputs.
    #[test]
    fn each_operator_gives_the_hand_worked_values_row_by_row() {
        let f32s = |v: &[f32]| Tensor::F32(v.to_vec());
        let sum = run(
            Operator::Sum,
            DType::F32,
            "2x3",
            &[("x", f32s(&[1.0, -2.0, 3.0, 0.5, 0.5, -4.0]))],
        );
        let (name, y) = sum.iter().next().unwrap();
        close(&y.values, &[2.0, -3.0]);
        close(y.scale.as_deref().expect("a sum's scale"), &[6.0, 5.0]);
        assert!(!name.is_empty());

        let (l2, l3) = (2f32.ln(), 3f32.ln());
        let x = f32s(&[0.0, l2, l3, l3, l2, 0.0]);
        let e = |v: f32| (v as f64).exp();
        let total = e(0.0) + e(l2) + e(l3);
        let softmax = run(Operator::Softmax, DType::F32, "2x3", &[("x", x.clone())]);
        let want: Vec<f64> = [0.0, l2, l3, l3, l2, 0.0]
            .iter()
            .map(|&v| e(v) / total)
            .collect();
        close(&softmax["y"].values, &want);

        let ce = run(
            Operator::CrossEntropy,
            DType::F32,
            "2x3",
            &[("x", x), ("target", Tensor::I64(vec![2, IGNORE_INDEX]))],
        );
        close(&ce["loss"].values, &[total.ln() - l3 as f64, 0.0]);

        let w = f32s(&[2.0, 0.5]);
        let rms = run(
            Operator::Rmsnorm,
            DType::F32,
            "1x2",
            &[("x", f32s(&[3.0, 4.0])), ("weight", w.clone())],
        );
        let inv = 1.0 / (12.5 + RMSNORM_EPS as f64).sqrt();
        close(&rms["y"].values, &[3.0 * inv * 2.0, 4.0 * inv * 0.5]);

        let b = f32s(&[1.0, -1.0]);
        let ln = run(
            Operator::Layernorm,
            DType::F32,
            "2x2",
            &[
                ("x", f32s(&[1.0, 3.0, 5.0, 5.0])),
                ("weight", w.clone()),
                ("bias", b.clone()),
            ],
        );
        let rstd = 1.0 / (1.0 + LAYERNORM_EPS as f64).sqrt();
        close(
            &ln["y"].values,
            &[-rstd * 2.0 + 1.0, rstd * 0.5 - 1.0, 1.0, -1.0],
        );

        // h rounds to the storage dtype first: 1 + 2^-9 is 1 in bf16.
        let bf = |v: &[f32]| Tensor::Bf16(v.iter().map(|&x| half::bf16::from_f32(x)).collect());
        let tiny = 1.0 / 512.0;
        let rln = run(
            Operator::ResidualLayernorm,
            DType::Bf16,
            "1x2",
            &[
                ("x", bf(&[1.0, 3.0])),
                ("residual", bf(&[tiny, 0.0])),
                ("weight", bf(&[2.0, 0.5])),
                ("bias", bf(&[1.0, -1.0])),
            ],
        );
        close(&rln["h"].values, &[1.0, 3.0]);
        close(&rln["y"].values, &[-rstd * 2.0 + 1.0, rstd * 0.5 - 1.0]);
    }

    /// The reference follows PyTorch on non-finite rows, and agrees in
    /// kind and value with the independently written oracle.
    #[test]
    fn non_finite_rows_follow_torch_and_the_oracle() {
        let neg = f32::NEG_INFINITY;
        let x = Tensor::F32(vec![
            neg,
            1.0,
            neg,
            2.0, // partially masked
            neg,
            neg,
            neg,
            neg, // fully masked
            1.0,
            f32::NAN,
            2.0,
            3.0, // a NaN
            1.0,
            f32::INFINITY,
            2.0,
            3.0, // +inf
        ]);
        let softmax = run(Operator::Softmax, DType::F32, "4x4", &[("x", x.clone())]);
        let y = &softmax["y"].values;
        assert_eq!((y[0], y[2]), (0.0, 0.0));
        assert!((y[1] + y[3] - 1.0).abs() < 1e-12);
        assert!(y[4..].iter().all(|v| v.is_nan()));
        let targets = Tensor::I64(vec![0, 1, IGNORE_INDEX, 0]);
        let ce = run(
            Operator::CrossEntropy,
            DType::F32,
            "4x4",
            &[("x", x.clone()), ("target", targets.clone())],
        );
        let loss = &ce["loss"].values;
        assert_eq!(loss[0], f64::INFINITY, "a masked target's loss is +inf");
        assert!(loss[1].is_nan() && loss[3].is_nan());
        assert_eq!(loss[2], 0.0, "an ignored row is 0 even over a NaN");
        for (op, extra) in [
            (Operator::Softmax, None),
            (Operator::CrossEntropy, Some(("target", targets))),
            (
                Operator::Rmsnorm,
                Some(("weight", Tensor::F32(vec![1.0; 4]))),
            ),
        ] {
            let problem = Problem::operator(
                op,
                OperatorOptions::default(),
                DType::F32,
                "4x4".parse().unwrap(),
            );
            let mut inputs: Buffers = [("x".to_string(), x.clone())].into_iter().collect();
            if let Some((k, t)) = extra {
                inputs.insert(k.to_string(), t);
            }
            let a = reference(&problem, &inputs).unwrap();
            let b = crate::oracle::expected(&problem, &inputs).unwrap();
            for (name, e) in &a {
                for (i, (p, q)) in e.values.iter().zip(&b[name].values).enumerate() {
                    let same = (p.is_nan() && q.is_nan()) || (p - q).abs() <= 1e-12 || p == q;
                    assert!(same, "{op} {name}[{i}]: {p} vs {q}");
                }
            }
        }
    }
}
