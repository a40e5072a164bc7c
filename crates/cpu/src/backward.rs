//! The float64 oracle of the input gradients (dx): each written plainly
//! per row from its textbook formula, independent of the IR programs and
//! the executor, as `reference` is for the forward operators. The tests
//! check each formula against central differences of `reference`.

use crate::data::Buffers;
use crate::reference::{Expected, Reference};
use lanefold_ir::{Operator, IGNORE_INDEX};
use lanefold_plan::Problem;
use rayon::prelude::*;

/// `dx` of `op` (a backward operator) for every row; None for a forward
/// operator (cross_entropy_with_grad's loss is the forward reference's). Each element's scale is the sum of the magnitudes of the terms
/// its formula adds: a gradient is a difference of terms that may cancel
/// (rmsnorm's dx of a one-element row is ~eps times its terms), and any
/// f32 evaluation's error scales with the terms, not with what is left.
pub fn reference_backward(op: Operator, problem: &Problem, inputs: &Buffers) -> Option<Reference> {
    op.forward()?;
    let n = problem.shape.n;
    let row = |name: &str, r: usize| -> Vec<f64> {
        let t = &inputs[name];
        (0..n).map(|i| t.get(r * n + i) as f64).collect()
    };
    let weight: Option<Vec<f64>> = inputs.get("weight").map(|t| t.to_f64());
    // g = w * dy, the gradient reaching the normalized row.
    let weighted = |dy: Vec<f64>| -> Vec<f64> {
        match &weight {
            Some(w) => dy.iter().zip(w).map(|(d, w)| d * w).collect(),
            None => dy,
        }
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / n as f64;
    let eps = crate::reference::norm_eps(problem);
    let layer_norm_dx = |x: &[f64], g: &[f64], dx: &mut [f64], scale: &mut [f64]| {
        let mu = mean(x);
        let var = x.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n as f64;
        let rstd = 1.0 / (var + eps).sqrt();
        let xhat: Vec<f64> = x.iter().map(|v| (v - mu) * rstd).collect();
        let mean_g = mean(g);
        let mean_gx = g.iter().zip(&xhat).map(|(g, h)| g * h).sum::<f64>() / n as f64;
        for i in 0..n {
            dx[i] = rstd * (g[i] - mean_g - xhat[i] * mean_gx);
            scale[i] = rstd * (g[i].abs() + mean_g.abs() + (xhat[i] * mean_gx).abs());
        }
    };
    let row_dx = |r: usize, dx: &mut [f64], scale: &mut [f64]| match op {
        Operator::RmsnormBackward => {
            let x = row("x", r);
            let g = weighted(row("dy", r));
            let rstd = 1.0 / (mean(&x.iter().map(|v| v * v).collect::<Vec<_>>()) + eps).sqrt();
            let mean_gx = g.iter().zip(&x).map(|(g, x)| g * x).sum::<f64>() / n as f64;
            for i in 0..n {
                dx[i] = rstd * g[i] - x[i] * rstd.powi(3) * mean_gx;
                scale[i] = (rstd * g[i]).abs() + (x[i] * rstd.powi(3) * mean_gx).abs();
            }
        }
        Operator::LayernormBackward => {
            layer_norm_dx(&row("x", r), &weighted(row("dy", r)), dx, scale)
        }
        Operator::ResidualLayernormBackward => {
            layer_norm_dx(&row("h", r), &weighted(row("dy", r)), dx, scale);
            for ((d, s), h) in dx.iter_mut().zip(scale.iter_mut()).zip(row("dh", r)) {
                *d += h;
                *s += h.abs();
            }
        }
        Operator::SoftmaxBackward => {
            let (y, dy) = (row("y", r), row("dy", r));
            let dot: f64 = y.iter().zip(&dy).map(|(y, d)| y * d).sum();
            for i in 0..n {
                dx[i] = y[i] * (dy[i] - dot);
                scale[i] = y[i].abs() * (dy[i].abs() + dot.abs());
            }
        }
        Operator::CrossEntropyBackward => {
            // From the given lse, whatever it is: p = exp(x - lse), and g
            // multiplies every term (g = 0 on an ignored row, where a NaN
            // p stays NaN, as in torch's log_softmax backward).
            let t = inputs["target"].index(r);
            let x = row("x", r);
            // A non-finite lse means an undefined softmax: NaN throughout.
            let lse = Some(inputs["lse"].get(r) as f64)
                .filter(|l| l.is_finite())
                .unwrap_or(f64::NAN);
            let g = if t == IGNORE_INDEX {
                0.0
            } else {
                inputs["dloss"].get(r) as f64
            };
            for i in 0..n {
                let onehot = if i as i64 == t { 1.0 } else { 0.0 };
                let p = (x[i] - lse).exp();
                dx[i] = p * g - onehot * g;
                scale[i] = (p + onehot) * g.abs();
            }
        }
        Operator::CrossEntropyBackwardRecompute | Operator::CrossEntropyWithGrad => {
            // g = 0 on an ignored row: 0 times softmax, NaN where the
            // softmax is, as in torch's log_softmax backward.
            let t = inputs["target"].index(r);
            let x = row("x", r);
            let g = if t == IGNORE_INDEX {
                0.0
            } else {
                inputs["dloss"].get(r) as f64
            };
            let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let total: f64 = x.iter().map(|v| (v - m).exp()).sum();
            for i in 0..n {
                let onehot = if i as i64 == t { 1.0 } else { 0.0 };
                let p = (x[i] - m).exp() / total;
                dx[i] = (p - onehot) * g;
                scale[i] = (p + onehot) * g.abs();
            }
        }
        _ => unreachable!("a backward operator"),
    };
    let mut values = vec![0.0; problem.shape.rows * n];
    let mut scale = vec![0.0; problem.shape.rows * n];
    values
        .par_chunks_mut(n)
        .zip(scale.par_chunks_mut(n))
        .enumerate()
        .for_each(|(r, (dx, s))| row_dx(r, dx, s));
    Some(Reference::from([(
        "dx".to_string(),
        Expected {
            values,
            scale: Some(scale),
        },
    )]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{random_inputs, Tensor};
    use crate::reference::reference;
    use lanefold_ir::{DType, OperatorOptions};

    fn problem(op: Operator, weight: bool, shape: &str) -> Problem {
        Problem::operator(
            op,
            OperatorOptions { weight, bias: true },
            DType::F32,
            shape.parse().unwrap(),
        )
    }

    /// `L = sum over outputs o of <o, cotangent[o]>` by the forward float64
    /// reference, and its derivative along element `i` of input `name` by a
    /// central difference (the step actually taken in f32 divides).
    fn central_difference(
        forward: &Problem,
        inputs: &Buffers,
        cotangents: &Buffers,
        name: &str,
        i: usize,
    ) -> f64 {
        let loss = |inputs: &Buffers| -> f64 {
            let out = reference(forward, inputs).unwrap();
            out.iter()
                .map(|(o, e)| {
                    let c = &cotangents[o];
                    e.values
                        .iter()
                        .enumerate()
                        .map(|(k, v)| v * c.get(k) as f64)
                        .sum::<f64>()
                })
                .sum()
        };
        let x = inputs[name].get(i);
        let h = 1e-3f32 * x.abs().max(1.0);
        let mut plus = inputs.clone();
        plus.get_mut(name).unwrap().set(i, x + h);
        let mut minus = inputs.clone();
        minus.get_mut(name).unwrap().set(i, x - h);
        let step = plus[name].get(i) as f64 - minus[name].get(i) as f64;
        (loss(&plus) - loss(&minus)) / step
    }

    /// Each oracle against central differences of the forward reference,
    /// on every element of a few small rows, with and without a weight;
    /// cross entropy with an ignored row (whose gradient is exactly 0).
    #[test]
    fn each_oracle_matches_central_differences_of_the_forward_reference() {
        let shape = "3x7";
        for op in Operator::BACKWARD {
            for weight in [false, true] {
                let fwd_op = op.forward().unwrap();
                let forward = problem(fwd_op, weight, shape);
                let backward = problem(op, weight, shape);
                let mut fin = random_inputs(&forward, 11);
                let seeds = random_inputs(&backward, 12);
                // The cotangent of each forward output and the inputs of dx.
                let mut cot = Buffers::new();
                let mut bin = Buffers::new();
                let wrt = match fwd_op {
                    Operator::CrossEntropy => {
                        let t = Tensor::I64(vec![2, IGNORE_INDEX, 6]);
                        fin.insert("target".into(), t.clone());
                        bin.insert("target".into(), t);
                        cot.insert("loss".into(), seeds["dloss"].clone());
                        bin.insert("dloss".into(), seeds["dloss"].clone());
                        bin.insert("x".into(), fin["x"].clone());
                        "x"
                    }
                    Operator::Softmax => {
                        cot.insert("y".into(), seeds["dy"].clone());
                        bin.insert("dy".into(), seeds["dy"].clone());
                        let y = &reference(&forward, &fin).unwrap()["y"].values;
                        let y32: Vec<f32> = y.iter().map(|&v| v as f32).collect();
                        bin.insert("y".into(), Tensor::F32(y32));
                        "x"
                    }
                    Operator::ResidualLayernorm => {
                        cot.insert("y".into(), seeds["dy"].clone());
                        cot.insert("h".into(), seeds["dh"].clone());
                        bin.insert("dy".into(), seeds["dy"].clone());
                        bin.insert("dh".into(), seeds["dh"].clone());
                        let h = &reference(&forward, &fin).unwrap()["h"].values;
                        let h32: Vec<f32> = h.iter().map(|&v| v as f32).collect();
                        bin.insert("h".into(), Tensor::F32(h32));
                        "x"
                    }
                    _ => {
                        cot.insert("y".into(), seeds["dy"].clone());
                        bin.insert("dy".into(), seeds["dy"].clone());
                        bin.insert("x".into(), fin["x"].clone());
                        "x"
                    }
                };
                if backward.program.input("weight").is_some() {
                    bin.insert("weight".into(), fin["weight"].clone());
                }
                if let Some(lse) = crate::data::saved_lse(&backward, &bin) {
                    bin.insert("lse".into(), lse);
                }
                let dx = &reference_backward(op, &backward, &bin).unwrap()["dx"].values;
                for (i, &d) in dx.iter().enumerate() {
                    let fd = central_difference(&forward, &fin, &cot, wrt, i);
                    assert!(
                        (fd - d).abs() <= 1e-4 * (1.0 + d.abs()),
                        "{op} weight={weight} element {i}: oracle {d} against difference {fd}"
                    );
                }
                if fwd_op == Operator::CrossEntropy {
                    assert!(dx[7..14].iter().all(|&d| d == 0.0), "the ignored row");
                    assert!(dx[..7].iter().any(|&d| d != 0.0));
                }
            }
        }
    }

    /// The executor's backward programs against the oracle, over layouts
    /// that split rows unevenly, in every dtype (seeded targets include
    /// ignored rows).
    #[test]
    fn the_executor_runs_every_backward_program_within_tolerance() {
        use crate::data::poisoned_outputs;
        use crate::{execute, validate};
        use lanefold_plan::{plan, LayoutRequest, Target};
        for op in Operator::BACKWARD {
            for dtype in [DType::F32, DType::Bf16, DType::F16] {
                for (shape, workers, pack) in [("5x129", 32, 4), ("3x4103", 256, 2), ("2x1", 1, 1)]
                {
                    let problem = Problem::operator(
                        op,
                        OperatorOptions::default(),
                        dtype,
                        shape.parse().unwrap(),
                    );
                    let request = LayoutRequest {
                        workers,
                        pack,
                        ..Default::default()
                    };
                    let p = plan(&problem, &Target::cpu(), &request).unwrap();
                    let inputs = random_inputs(&problem, 5);
                    let mut outputs = poisoned_outputs(&problem);
                    execute(&p, &inputs, &mut outputs).unwrap();
                    let want = reference(&problem, &inputs).unwrap();
                    let v = validate(dtype, &outputs, &want);
                    assert!(v.pass, "{op} {dtype} {shape}: {:?}", v.outputs);
                    if dtype == DType::F32 && shape == "5x129" {
                        // One element off by 1% is caught.
                        let dx = outputs.get_mut("dx").unwrap();
                        let x = dx.get(70);
                        dx.set(70, x * 1.01 + 1e-3);
                        assert!(!validate(dtype, &outputs, &want).pass, "{op}");
                    }
                }
            }
        }
    }

    /// cross_entropy_with_grad's loss is the forward's and its dx the
    /// backward's, bit for bit, on the same layout, with and without the
    /// online normalizer, in every dtype.
    #[test]
    fn cross_entropy_with_grad_gives_the_forwards_loss_and_the_backwards_dx_bits() {
        use crate::data::poisoned_outputs;
        use crate::execute;
        use lanefold_plan::{plan, LayoutRequest, Target};
        for dtype in [DType::F32, DType::Bf16, DType::F16] {
            for online_normalizer in [false, true] {
                for (shape, workers, pack) in [("7x129", 32, 4), ("3x4103", 256, 2), ("2x1", 1, 1)]
                {
                    let request = LayoutRequest {
                        workers,
                        pack,
                        online_normalizer,
                        ..Default::default()
                    };
                    let problem = |op| {
                        let shape = shape.parse().unwrap();
                        Problem::operator(op, OperatorOptions::default(), dtype, shape)
                    };
                    let inputs = random_inputs(&problem(Operator::CrossEntropyWithGrad), 9);
                    let run = |op| -> Buffers {
                        let problem = problem(op);
                        let p = plan(&problem, &Target::cpu(), &request).unwrap();
                        let mut mine = inputs.clone();
                        mine.retain(|name, _| problem.program.input(name).is_some());
                        let mut outputs = poisoned_outputs(&problem);
                        execute(&p, &mine, &mut outputs).unwrap();
                        outputs
                    };
                    let got = run(Operator::CrossEntropyWithGrad);
                    let loss = run(Operator::CrossEntropy);
                    let dx = run(Operator::CrossEntropyBackwardRecompute);
                    let label = format!("{dtype} {shape} online={online_normalizer}");
                    assert!(got["loss"].same_bits(&loss["loss"]), "{label}");
                    assert!(got["dx"].same_bits(&dx["dx"]), "{label}");
                    // One class: every loss and gradient is 0.
                    let some = |t: &Tensor| t.to_f64().iter().any(|&v| v != 0.0);
                    assert_eq!(some(&got["loss"]), shape != "2x1", "{label}");
                    assert_eq!(some(&got["dx"]), shape != "2x1", "{label}");
                }
            }
        }
    }

    /// The backward from the saved lse and the recomputing one agree on the
    /// same inputs within the dtype's tolerance (not bit for bit: one
    /// divides by a sum, the other subtracts a logarithm), through the
    /// executor; and the saved lse is what cross_entropy_with_lse writes.
    #[test]
    fn the_saved_lse_backward_matches_the_recomputing_one() {
        use crate::data::poisoned_outputs;
        use crate::{execute, validate};
        use lanefold_plan::{plan, LayoutRequest, Target};
        for dtype in [DType::F32, DType::Bf16, DType::F16] {
            for shape in ["7x129", "3x4103", "2x1", "4x50257"] {
                let problem = |op| {
                    Problem::operator(
                        op,
                        OperatorOptions::default(),
                        dtype,
                        shape.parse().unwrap(),
                    )
                };
                let saved = problem(Operator::CrossEntropyBackward);
                let inputs = random_inputs(&saved, 21);
                let run = |op, inputs: &Buffers| -> Buffers {
                    let problem = problem(op);
                    let p = plan(&problem, &Target::cpu(), &LayoutRequest::default()).unwrap();
                    let mut mine = inputs.clone();
                    mine.retain(|name, _| problem.program.input(name).is_some());
                    let mut outputs = poisoned_outputs(&problem);
                    execute(&p, &mine, &mut outputs).unwrap();
                    outputs
                };
                let label = format!("{dtype} {shape}");
                // The forward's saved lse is the seeded one, to f32's rounding.
                let fwd = run(Operator::CrossEntropyWithLse, &inputs);
                let (got, want) = (fwd["lse"].to_f64(), inputs["lse"].to_f64());
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{label}: {g} {w}");
                }
                let from_lse = run(Operator::CrossEntropyBackward, &inputs);
                let recomputed = run(Operator::CrossEntropyBackwardRecompute, &inputs);
                let want =
                    reference(&problem(Operator::CrossEntropyBackwardRecompute), &inputs).unwrap();
                for out in [&from_lse, &recomputed] {
                    let v = validate(dtype, out, &want);
                    assert!(v.pass, "{label}: {:?}", v.outputs);
                }
                let (a, b) = (from_lse["dx"].to_f64(), recomputed["dx"].to_f64());
                let diff = a.iter().zip(&b).map(|(a, b)| (a - b).powi(2)).sum::<f64>();
                let norm = b.iter().map(|b| b * b).sum::<f64>();
                assert!(
                    diff.sqrt() <= dtype.tolerance() * norm.sqrt().max(1e-30),
                    "{label}: {diff} {norm}"
                );
                // A wrong lse moves every element: the check can fail
                // (where the targets' terms leave p's share of the norm
                // above the tolerance: not 16-bit rows of 50257).
                let shift = if dtype == DType::F32 { 0.05 } else { 1.0 };
                let mut off = inputs.clone();
                let lse = off.get_mut("lse").unwrap();
                for r in 0..lse.len() {
                    lse.set(r, lse.get(r) - shift);
                }
                if shape != "2x1" && (dtype == DType::F32 || shape != "4x50257") {
                    let v = validate(dtype, &run(Operator::CrossEntropyBackward, &off), &want);
                    assert!(!v.pass, "{label}");
                }
            }
        }
    }

    /// Non-finite rows as torch's log_softmax backward gives them: a fully
    /// -inf (masked) row has lse = -inf and every dx NaN, its target
    /// ignored or not; a partly masked row gives 0 at its -inf elements.
    #[test]
    fn the_saved_lse_backward_of_masked_rows() {
        let inf = f32::INFINITY;
        let x = [-inf, -inf, -inf, 0.5, -inf, 1.0, -inf, -inf, -inf];
        let problem = Problem::operator(
            Operator::CrossEntropyBackward,
            OperatorOptions::default(),
            DType::F32,
            "3x3".parse().unwrap(),
        );
        let mut inputs = Buffers::from([
            ("x".to_string(), Tensor::F32(x.to_vec())),
            ("target".to_string(), Tensor::I64(vec![1, 2, IGNORE_INDEX])),
            ("dloss".to_string(), Tensor::F32(vec![1.0, 0.5, 1.0])),
        ]);
        let lse = crate::data::saved_lse(&problem, &inputs).unwrap();
        assert_eq!(lse.get(0), -inf);
        inputs.insert("lse".into(), lse);
        for want in [
            reference_backward(Operator::CrossEntropyBackward, &problem, &inputs).unwrap(),
            crate::oracle::expected(&problem, &inputs).unwrap(),
        ] {
            let dx = &want["dx"].values;
            assert!(dx[..3].iter().all(|v| v.is_nan()), "{dx:?}");
            assert!(dx[6..].iter().all(|v| v.is_nan()), "ignored: {dx:?}");
            assert_eq!(dx[4], 0.0);
            let p = (0.5f64 - 1.0).exp();
            let s = 1.0 + p;
            assert!((dx[3] - 0.5 * p / s).abs() < 1e-6, "{dx:?}");
            assert!((dx[5] - 0.5 * (1.0 / s - 1.0)).abs() < 1e-6, "{dx:?}");
        }
        let out = executed(&problem, &inputs, &Default::default());
        let want = reference_backward(Operator::CrossEntropyBackward, &problem, &inputs).unwrap();
        assert!(crate::validate(DType::F32, &out, &want).pass);
    }

    /// `problem` planned for the CPU with `request` and run on `inputs`.
    fn executed(
        problem: &Problem,
        inputs: &Buffers,
        request: &lanefold_plan::LayoutRequest,
    ) -> Buffers {
        let p = lanefold_plan::plan(problem, &lanefold_plan::Target::cpu(), request).unwrap();
        let mut out = crate::data::poisoned_outputs(problem);
        crate::execute(&p, inputs, &mut out).unwrap();
        out
    }

    /// An ignored row's dlogits are 0 times softmax, as in torch's
    /// log_softmax backward: NaN where the row's softmax is (a NaN, a +inf,
    /// every entry -inf), 0 elsewhere. The recomputing forms' reference
    /// once wrote 0 there and called the kernel's NaN wrong.
    #[test]
    fn regression_an_ignored_row_with_an_undefined_softmax_was_zero() {
        let inf = f32::INFINITY;
        let rows = [
            [1.0, f32::NAN, 0.0],
            [inf, 0.0, 1.0],
            [-inf, -inf, -inf],
            [-inf, 0.5, 1.0], // the one finite softmax
        ];
        let x = rows.concat();
        for op in [
            Operator::CrossEntropyBackwardRecompute,
            Operator::CrossEntropyWithGrad,
            Operator::CrossEntropyBackward,
        ] {
            let problem = Problem::operator(
                op,
                OperatorOptions::default(),
                DType::F32,
                "4x3".parse().unwrap(),
            );
            let mut inputs = Buffers::from([
                ("x".to_string(), Tensor::F32(x.clone())),
                ("target".to_string(), Tensor::I64(vec![IGNORE_INDEX; 4])),
                ("dloss".to_string(), Tensor::F32(vec![1.0; 4])),
            ]);
            if op == Operator::CrossEntropyBackward {
                let lse = crate::data::saved_lse(&problem, &inputs).unwrap();
                inputs.insert("lse".into(), lse);
            }
            let want = reference_backward(op, &problem, &inputs).unwrap();
            let dx = &want["dx"].values;
            assert!(dx[..9].iter().all(|v| v.is_nan()), "{op}: {dx:?}");
            assert!(dx[9..].iter().all(|&v| v == 0.0), "{op}: {dx:?}");
            let out = executed(&problem, &inputs, &Default::default());
            let v = crate::validate(DType::F32, &out, &want);
            assert!(v.pass, "{op}: {v:?}");
        }
    }

    /// The saved lse is NaN wherever the softmax is undefined, in both
    /// normalizer forms: the online one stored -inf for a fully masked row,
    /// where its references (and the two-pass form) give NaN.
    #[test]
    fn regression_a_fully_masked_row_saved_minus_inf_under_the_online_normalizer() {
        let inf = f32::INFINITY;
        let rows = [
            [1.0, f32::NAN, 0.0, 2.0],
            [inf, 0.0, 1.0, 2.0],
            [-inf, -inf, -inf, -inf],
            [-inf, 0.5, 1.0, 2.0],
            [3e38, 3e38, 1.0, -3e38],
        ];
        let x = rows.concat();
        let problem = Problem::operator(
            Operator::CrossEntropyWithLse,
            OperatorOptions::default(),
            DType::F32,
            "5x4".parse().unwrap(),
        );
        let inputs = Buffers::from([
            ("x".to_string(), Tensor::F32(x.to_vec())),
            ("target".to_string(), Tensor::I64(vec![1; 5])),
        ]);
        for schedule in [
            "W=2 V=2",
            "W=2 V=2 online-normalizer",
            "W=1 V=1 stream online-normalizer",
        ] {
            let out = executed(&problem, &inputs, &schedule.parse().unwrap());
            let lse: Vec<f32> = (0..5).map(|r| out["lse"].get(r)).collect();
            assert!(lse[..3].iter().all(|v| v.is_nan()), "{schedule}: {lse:?}");
            assert!(
                lse[3..].iter().all(|v| v.is_finite()),
                "{schedule}: {lse:?}"
            );
            for want in [
                reference(&problem, &inputs),
                crate::oracle::expected(&problem, &inputs),
            ] {
                let v = crate::validate(DType::F32, &out, &want.unwrap());
                assert!(v.pass, "{schedule}: {v:?}");
            }
        }
    }

    #[test]
    fn forward_operators_have_no_backward_oracle() {
        let p = problem(Operator::Softmax, true, "1x4");
        let inputs = random_inputs(&p, 1);
        assert!(reference_backward(Operator::Softmax, &p, &inputs).is_none());
    }
}
