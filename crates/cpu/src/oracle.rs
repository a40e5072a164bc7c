//! A second float64 oracle for the differential fuzzer, written from the
//! operators' definitions and PyTorch's treatment of non-finite values,
//! sharing no code with [`crate::reference`] (so a slip in one shows up as
//! a disagreement with the other). Sums are compensated (Neumaier), the
//! non-finite cases are decided up front:
//!
//! - sum: NaN if the row holds a NaN or both infinities, else the infinity
//!   it holds, else the sum.
//! - softmax: every element NaN if the row holds a NaN or +inf or is all
//!   -inf; else `exp(x - max) / sum`, a -inf giving 0.
//! - cross_entropy: 0 for an ignored row; NaN under softmax's NaN rule;
//!   else `logsumexp(x) - x[t]`, +inf where `x[t]` is -inf.
//! - cross_entropy_with_lse: that loss, and `logsumexp(x)` on every row,
//!   ignored ones too, NaN under softmax's NaN rule (the forward's own
//!   `log(sum(exp(x - max))) + max` there).
//! - cross_entropy_backward, from the given `lse`: NaN throughout where it
//!   is not finite (an undefined softmax: a NaN, a +inf, every entry -inf;
//!   ignored rows too, as torch's log_softmax backward gives), else
//!   `exp(x - lse) * g - onehot(t) * g`, g = dloss or 0 on an ignored row.
//! - rmsnorm: NaN everywhere if the row holds a NaN; an infinity makes the
//!   mean square infinite, so each finite element gives 0 and each
//!   infinite one NaN (`x * rsqrt(inf)`); else `x / sqrt(mean(x^2) + eps)`.
//! - layernorm: NaN everywhere if h holds a non-finite value; else
//!   `(h - mean) / sqrt(var + eps)`, var the centred mean square.
//! - residual_layernorm: `h = storage(f32(x + residual))` first.

use crate::data::{expected_len, Buffers};
use crate::reference::{Expected, Reference};
use lanefold_ir::{Operator, IGNORE_INDEX};
use lanefold_plan::Problem;

/// Neumaier's compensated sum.
fn csum(values: impl Iterator<Item = f64>) -> f64 {
    let (mut s, mut c) = (0.0f64, 0.0f64);
    for v in values {
        let t = s + v;
        if s.abs() >= v.abs() {
            c += (s - t) + v;
        } else {
            c += (v - t) + s;
        }
        s = t;
    }
    s + c
}

/// NaN, or +inf, or every element -inf: softmax's all-NaN rows.
fn softmax_undefined(x: &[f64]) -> bool {
    x.iter().any(|v| v.is_nan() || *v == f64::INFINITY) || x.iter().all(|v| *v == f64::NEG_INFINITY)
}

fn softmax(x: &[f64]) -> Vec<f64> {
    if softmax_undefined(x) {
        return vec![f64::NAN; x.len()];
    }
    let m = x.iter().copied().fold(f64::MIN, f64::max);
    let e: Vec<f64> = x.iter().map(|v| (v - m).exp()).collect();
    let total = csum(e.iter().copied());
    e.iter().map(|v| v / total).collect()
}

/// `logsumexp(x)`, NaN under softmax's NaN rule.
fn log_sum_exp(x: &[f64]) -> f64 {
    if softmax_undefined(x) {
        return f64::NAN;
    }
    let m = x.iter().copied().fold(f64::MIN, f64::max);
    m + csum(x.iter().map(|v| (v - m).exp())).ln()
}

/// cross_entropy's dlogits from a saved `lse`, each with the magnitude of
/// the terms it subtracts (the target's `p*g - g` cancels where p ~ 1).
fn cross_entropy_dx(x: &[f64], target: i64, lse: f64, dloss: f64) -> Vec<(f64, f64)> {
    let g = if target == IGNORE_INDEX { 0.0 } else { dloss };
    // A non-finite lse means an undefined softmax: NaN throughout.
    let lse = if lse.is_finite() { lse } else { f64::NAN };
    x.iter()
        .enumerate()
        .map(|(i, v)| {
            let p = (v - lse).exp();
            let hit = if i as i64 == target { g } else { 0.0 };
            (p * g - hit, (p * g).abs() + hit.abs())
        })
        .collect()
}

fn cross_entropy(x: &[f64], target: i64) -> f64 {
    if target == IGNORE_INDEX {
        return 0.0;
    }
    if softmax_undefined(x) {
        return f64::NAN;
    }
    let xt = x[target as usize];
    if xt == f64::NEG_INFINITY {
        return f64::INFINITY;
    }
    let m = x.iter().copied().fold(f64::MIN, f64::max);
    let lse = m + csum(x.iter().map(|v| (v - m).exp())).ln();
    lse - xt
}

fn rmsnorm(x: &[f64], weight: Option<&[f64]>, eps: f64) -> Vec<f64> {
    let w = |i: usize| weight.map_or(1.0, |w| w[i]);
    if x.iter().any(|v| v.is_nan()) {
        return vec![f64::NAN; x.len()];
    }
    if x.iter().any(|v| v.is_infinite()) {
        return (0..x.len())
            .map(|i| {
                if x[i].is_infinite() {
                    f64::NAN
                } else {
                    0.0 * w(i)
                }
            })
            .collect();
    }
    let ms = csum(x.iter().map(|v| v * v)) / x.len() as f64;
    let d = (ms + eps).sqrt();
    (0..x.len()).map(|i| x[i] / d * w(i)).collect()
}

fn layernorm(h: &[f64], weight: Option<&[f64]>, bias: Option<&[f64]>, eps: f64) -> Vec<f64> {
    if h.iter().any(|v| !v.is_finite()) {
        return vec![f64::NAN; h.len()];
    }
    let n = h.len() as f64;
    let mean = csum(h.iter().copied()) / n;
    let var = csum(h.iter().map(|v| (v - mean).powi(2))) / n;
    let d = (var + eps).sqrt();
    (0..h.len())
        .map(|i| {
            let y = (h[i] - mean) / d * weight.map_or(1.0, |w| w[i]);
            y + bias.map_or(0.0, |b| b[i])
        })
        .collect()
}

fn sum(x: &[f64]) -> (f64, f64) {
    let nan = x.iter().any(|v| v.is_nan());
    let pos = x.contains(&f64::INFINITY);
    let neg = x.contains(&f64::NEG_INFINITY);
    let value = match (nan, pos, neg) {
        (true, ..) | (false, true, true) => f64::NAN,
        (false, true, false) => f64::INFINITY,
        (false, false, true) => f64::NEG_INFINITY,
        _ => csum(x.iter().copied()),
    };
    let scale = csum(x.iter().map(|v| v.abs()));
    (value, scale)
}

/// The oracle's outputs for `problem` on `inputs`, in the validator's
/// form; None for a program that is not one of the operators.
pub fn expected(problem: &Problem, inputs: &Buffers) -> Option<Reference> {
    let op = problem.operator_kind()?;
    let (rows, n) = (problem.shape.rows, problem.shape.n);
    let dtype = problem.dtype;
    let row = |name: &str, r: usize| -> Vec<f64> {
        let t = &inputs[name];
        (r * n..(r + 1) * n).map(|i| t.get(i) as f64).collect()
    };
    let weight = inputs.get("weight").map(|t| t.to_f64());
    let bias = inputs.get("bias").map(|t| t.to_f64());
    let eps = crate::reference::norm_eps(problem);
    let mut out: Vec<(String, Vec<f64>)> = problem
        .program
        .outputs
        .iter()
        .map(|d| {
            (
                d.name.clone(),
                Vec::with_capacity(expected_len(d.kind, rows, n)),
            )
        })
        .collect();
    let mut scale = vec![];
    for r in 0..rows {
        match op {
            Operator::Sum => {
                let (v, s) = sum(&row("x", r));
                out[0].1.push(v);
                scale.push(s);
            }
            Operator::Softmax => out[0].1.extend(softmax(&row("x", r))),
            Operator::CrossEntropy => {
                let t = inputs["target"].index(r);
                out[0].1.push(cross_entropy(&row("x", r), t));
            }
            Operator::CrossEntropyWithLse => {
                let (x, t) = (row("x", r), inputs["target"].index(r));
                out[0].1.push(cross_entropy(&x, t));
                out[1].1.push(log_sum_exp(&x));
            }
            Operator::CrossEntropyBackward => {
                let t = inputs["target"].index(r);
                let (lse, dloss) = (inputs["lse"].get(r) as f64, inputs["dloss"].get(r) as f64);
                for (dx, s) in cross_entropy_dx(&row("x", r), t, lse, dloss) {
                    out[0].1.push(dx);
                    scale.push(s);
                }
            }
            Operator::Rmsnorm => out[0]
                .1
                .extend(rmsnorm(&row("x", r), weight.as_deref(), eps)),
            Operator::Layernorm => out[0].1.extend(layernorm(
                &row("x", r),
                weight.as_deref(),
                bias.as_deref(),
                eps,
            )),
            Operator::ResidualLayernorm => {
                let (x, res) = (row("x", r), row("residual", r));
                let h: Vec<f64> = x
                    .iter()
                    .zip(&res)
                    .map(|(a, b)| dtype.round(*a as f32 + *b as f32) as f64)
                    .collect();
                let y = layernorm(&h, weight.as_deref(), bias.as_deref(), eps);
                for (name, values) in out.iter_mut() {
                    values.extend(if name == "h" { &h } else { &y });
                }
            }
            Operator::Add => {
                let (x, res) = (row("x", r), row("residual", r));
                out[0].1.extend(x.iter().zip(&res).map(|(a, b)| a + b));
            }
            // The other gradients' oracle is `backward::reference_backward`.
            _ => return None,
        }
    }
    let scale = matches!(op, Operator::Sum | Operator::CrossEntropyBackward).then_some(scale);
    Some(
        out.into_iter()
            .map(|(name, values)| {
                (
                    name,
                    Expected {
                        values,
                        scale: scale.clone(),
                    },
                )
            })
            .collect(),
    )
}
