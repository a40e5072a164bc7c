//! The float64 reference: each operator written plainly, independent of
//! the IR, the layout and the executor.

use crate::data::Buffers;
use lanefold_ir::{Operator, IGNORE_INDEX, LAYERNORM_EPS, RMSNORM_EPS};
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

/// Reference outputs for `problem`; None for a program that is not one of
/// lanefold's operators.
pub fn reference(problem: &Problem, inputs: &Buffers) -> Option<Reference> {
    let op = problem.operator_kind()?;
    let (rows, n) = (problem.shape.rows, problem.shape.n);
    let dtype = problem.dtype;
    let row = |name: &str, r: usize| -> Vec<f64> {
        let t = &inputs[name];
        (0..n).map(|i| t.get(r * n + i) as f64).collect()
    };
    let column = |name: &str| -> Option<Vec<f64>> { inputs.get(name).map(|t| t.to_f64()) };
    let weight = column("weight");
    let bias = column("bias");
    let layer_norm = |h: &[f64]| -> Vec<f64> {
        let mean = h.iter().sum::<f64>() / n as f64;
        let var = h.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        let rstd = 1.0 / (var + LAYERNORM_EPS as f64).sqrt();
        (0..n)
            .map(|i| {
                let mut y = (h[i] - mean) * rstd;
                if let Some(w) = &weight {
                    y *= w[i];
                }
                if let Some(b) = &bias {
                    y += b[i];
                }
                y
            })
            .collect()
    };
    // Per row: the values of each output, in output declaration order.
    let per_row: Vec<Vec<Vec<f64>>> = (0..rows)
        .into_par_iter()
        .map(|r| match op {
            Operator::Sum => {
                let x = row("x", r);
                vec![vec![x.iter().sum()], vec![x.iter().map(|v| v.abs()).sum()]]
            }
            Operator::Softmax => {
                let x = row("x", r);
                let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = x.iter().map(|v| (v - m).exp()).collect();
                let s: f64 = e.iter().sum();
                vec![e.iter().map(|v| v / s).collect()]
            }
            Operator::Rmsnorm => {
                let x = row("x", r);
                let ms = x.iter().map(|v| v * v).sum::<f64>() / n as f64;
                let inv = 1.0 / (ms + RMSNORM_EPS as f64).sqrt();
                vec![(0..n)
                    .map(|i| x[i] * inv * weight.as_ref().map_or(1.0, |w| w[i]))
                    .collect()]
            }
            Operator::Layernorm => vec![layer_norm(&row("x", r))],
            Operator::ResidualLayernorm => {
                let (x, res) = (row("x", r), row("residual", r));
                // h is materialized in the storage dtype, as PyTorch does.
                let h: Vec<f64> = (0..n)
                    .map(|i| dtype.round((x[i] + res[i]) as f32) as f64)
                    .collect();
                let y = layer_norm(&h);
                vec![h, y]
            }
            Operator::CrossEntropy => {
                let x = row("x", r);
                let t = inputs["target"].index(r);
                let loss = if t == IGNORE_INDEX {
                    0.0
                } else {
                    let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let lse = x.iter().map(|v| (v - m).exp()).sum::<f64>().ln() + m;
                    lse - x[t as usize]
                };
                vec![vec![loss]]
            }
            Operator::Add => {
                let (x, res) = (row("x", r), row("residual", r));
                vec![(0..n).map(|i| x[i] + res[i]).collect()]
            }
        })
        .collect();
    let mut out = Reference::new();
    for (k, decl) in problem.program.outputs.iter().enumerate() {
        let values: Vec<f64> = per_row.iter().flat_map(|r| r[k].iter().copied()).collect();
        let scale = (op == Operator::Sum).then(|| per_row.iter().map(|r| r[1][0]).collect());
        out.insert(decl.name.clone(), Expected { values, scale });
    }
    Some(out)
}
