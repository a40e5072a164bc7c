//! Validation of any backend's outputs against the float64 reference.

use crate::data::Buffers;
use crate::reference::Reference;
use lanefold_ir::DType;
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
        let (mut diff2, mut ref2, mut max_abs, mut nonfinite) = (0f64, 0f64, 0f64, 0usize);
        let length_ok = got.len() == want.len();
        for (i, &r) in want.iter().enumerate().take(got.len()) {
            let scale = expected.scale.as_ref().map_or(r.abs(), |s| s[i]);
            let g = got.get(i) as f64;
            if !g.is_finite() && r.is_finite() {
                nonfinite += 1;
                continue;
            }
            let d = g - r;
            diff2 += d * d;
            ref2 += scale * scale;
            max_abs = max_abs.max(d.abs());
        }
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
