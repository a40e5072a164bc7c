//! Validation of any backend's outputs against the float64 reference.

use crate::data::Buffers;
use crate::reference::Reference;
use lanefold_ir::DType;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputCheck {
    pub name: String,
    pub elements: usize,
    /// Elements that are NaN or infinite where the reference is finite
    /// (an unwritten, poisoned element lands here).
    pub nonfinite: usize,
    pub max_abs_err: f64,
    /// ||out - ref||_2 / ||scale||_2 (scale = |ref|, or sum |x| for sums).
    pub rel_err: f64,
    pub tolerance: f64,
    pub pass: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Validation {
    pub outputs: Vec<OutputCheck>,
    pub pass: bool,
}

impl Validation {
    /// The worst normwise relative error over the outputs.
    pub fn worst_rel_err(&self) -> f64 {
        self.outputs.iter().map(|o| o.rel_err).fold(0.0, f64::max)
    }
}

/// Sums over one block of elements.
#[derive(Clone, Copy, Default)]
struct Partial {
    diff2: f64,
    ref2: f64,
    max_abs: f64,
    nonfinite: usize,
}

/// Elements per block: blocks run in parallel and their sums are added in
/// block order, so the result does not depend on the thread count.
const BLOCK: usize = 1 << 16;

/// Compare `got` with `want` element by element (`scale[i]` or `|want[i]|`
/// weighs the relative error).
fn compare(got: &crate::data::Tensor, want: &[f64], scale: Option<&[f64]>) -> Partial {
    let len = got.len().min(want.len());
    let blocks: Vec<Partial> = (0..len.div_ceil(BLOCK))
        .into_par_iter()
        .map(|b| {
            let mut p = Partial::default();
            for i in b * BLOCK..((b + 1) * BLOCK).min(len) {
                let r = want[i];
                let s = scale.map_or(r.abs(), |s| s[i]);
                let g = got.get(i) as f64;
                if !g.is_finite() && r.is_finite() {
                    p.nonfinite += 1;
                    continue;
                }
                let d = g - r;
                p.diff2 += d * d;
                p.ref2 += s * s;
                p.max_abs = p.max_abs.max(d.abs());
            }
            p
        })
        .collect();
    blocks.iter().fold(Partial::default(), |a, p| Partial {
        diff2: a.diff2 + p.diff2,
        ref2: a.ref2 + p.ref2,
        max_abs: a.max_abs.max(p.max_abs),
        nonfinite: a.nonfinite + p.nonfinite,
    })
}

/// Check every element of every output.
pub fn validate(dtype: DType, outputs: &Buffers, reference: &Reference) -> Validation {
    let tolerance = dtype.tolerance();
    let mut checks = vec![];
    for (name, expected) in reference {
        let want = &expected.values;
        let Some(got) = outputs.get(name) else {
            checks.push(OutputCheck {
                name: name.clone(),
                elements: 0,
                nonfinite: expected.values.len(),
                max_abs_err: f64::INFINITY,
                rel_err: f64::INFINITY,
                tolerance,
                pass: false,
            });
            continue;
        };
        let length_ok = got.len() == want.len();
        let Partial {
            diff2,
            ref2,
            max_abs,
            nonfinite,
        } = compare(got, want, expected.scale.as_deref());
        // An all-zero reference (e.g. every row ignored) is judged absolutely.
        let rel = if ref2 > 0.0 {
            (diff2 / ref2).sqrt()
        } else {
            diff2.sqrt()
        };
        checks.push(OutputCheck {
            name: name.clone(),
            elements: got.len(),
            nonfinite,
            max_abs_err: max_abs,
            rel_err: rel,
            tolerance,
            pass: length_ok && nonfinite == 0 && rel <= tolerance,
        });
    }
    let pass = !checks.is_empty() && checks.iter().all(|c| c.pass);
    Validation {
        outputs: checks,
        pass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{poisoned_outputs, random_inputs, Tensor};
    use crate::exec::execute;
    use crate::reference::reference;
    use lanefold_ir::{Operator, OperatorOptions};
    use lanefold_plan::{plan, LayoutRequest, Problem, Target};

    #[test]
    fn validation_does_not_depend_on_the_thread_count() {
        let problem = Problem::operator(
            Operator::Softmax,
            OperatorOptions::default(),
            DType::Bf16,
            "40x5000".parse().unwrap(), // 200k elements: several blocks
        );
        let p = plan(&problem, &Target::cpu(), &LayoutRequest::default()).unwrap();
        let inputs = random_inputs(&problem, 3);
        let mut outputs = poisoned_outputs(&problem);
        execute(&p, &inputs, &mut outputs).unwrap();
        let r = reference(&problem, &inputs).unwrap();
        let on = |threads| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| validate(DType::Bf16, &outputs, &r))
        };
        let one = on(1);
        assert!(one.pass && one.worst_rel_err() > 0.0);
        assert_eq!(one, on(3));
    }

    #[test]
    fn a_single_unwritten_element_fails_validation() {
        let problem = Problem::operator(
            Operator::Softmax,
            OperatorOptions::default(),
            DType::F32,
            "3x100".parse().unwrap(),
        );
        let p = plan(&problem, &Target::cpu(), &LayoutRequest::default()).unwrap();
        let inputs = random_inputs(&problem, 1);
        let mut outputs = poisoned_outputs(&problem);
        execute(&p, &inputs, &mut outputs).unwrap();
        let r = reference(&problem, &inputs).unwrap();
        assert!(validate(DType::F32, &outputs, &r).pass);
        if let Some(Tensor::F32(v)) = outputs.get_mut("y") {
            v[157] = f32::NAN;
        }
        let v = validate(DType::F32, &outputs, &r);
        assert!(!v.pass);
        assert_eq!(v.outputs[0].nonfinite, 1);
    }

    #[test]
    fn a_wrong_value_fails_validation() {
        let problem = Problem::operator(
            Operator::Rmsnorm,
            OperatorOptions::default(),
            DType::F32,
            "2x64".parse().unwrap(),
        );
        let p = plan(&problem, &Target::cpu(), &LayoutRequest::default()).unwrap();
        let inputs = random_inputs(&problem, 2);
        let mut outputs = poisoned_outputs(&problem);
        execute(&p, &inputs, &mut outputs).unwrap();
        if let Some(Tensor::F32(v)) = outputs.get_mut("y") {
            v[3] *= 1.01;
        }
        let r = reference(&problem, &inputs).unwrap();
        assert!(!validate(DType::F32, &outputs, &r).pass);
    }
}
