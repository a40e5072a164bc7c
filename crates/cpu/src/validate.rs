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
    /// Elements whose kind disagrees with the reference: NaN or infinite
    /// where the reference is finite (an unwritten, poisoned element lands
    /// here), or anything but the reference's own NaN, +inf or -inf where
    /// the reference is non-finite.
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

/// Does `got` match a non-finite expected value `want` exactly in kind:
/// NaN for NaN, an infinity of the same sign for an infinity?
fn same_nonfinite(got: f64, want: f64) -> bool {
    if want.is_nan() {
        got.is_nan()
    } else {
        got == want
    }
}

/// Compare `got` with `want` element by element (`scale[i]` or `|want[i]|`
/// weighs the relative error). Non-finite expected values must be met
/// exactly and stay out of the norms; a finite expected value beyond the
/// storage dtype's range (`max_finite`) may also be met by the infinity of
/// its sign, the value the rounding to storage gives.
fn compare(
    got: &crate::data::Tensor,
    want: &[f64],
    scale: Option<&[f64]>,
    max_finite: f64,
    floor: f64,
) -> Partial {
    let len = got.len().min(want.len());
    let blocks: Vec<Partial> = (0..len.div_ceil(BLOCK))
        .into_par_iter()
        .map(|b| {
            let mut p = Partial::default();
            for i in b * BLOCK..((b + 1) * BLOCK).min(len) {
                let r = want[i];
                let s = scale.map_or(r.abs(), |s| s[i]);
                let g = got.get(i) as f64;
                if !r.is_finite() {
                    if !same_nonfinite(g, r) {
                        p.nonfinite += 1;
                    }
                    continue;
                }
                if !g.is_finite() {
                    let overflowed = r.abs() > max_finite && g == r.signum() * f64::INFINITY;
                    if !overflowed {
                        p.nonfinite += 1;
                    }
                    continue;
                }
                if !s.is_finite() {
                    // A sum's scale over a row holding infinities: judged
                    // by its kind alone, as above.
                    continue;
                }
                // Errors within the output's own subnormal resolution are
                // no error (see `subnormal_floor`).
                let d = ((g - r).abs() - floor).max(0.0);
                p.diff2 += d * d;
                p.ref2 += s * s;
                p.max_abs = p.max_abs.max((g - r).abs());
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

/// The absolute error an element may carry beyond the relative tolerance:
/// the storage type's smallest subnormal (an output's own rounding there)
/// plus 2^13 of f32's (f32 arithmetic on subnormal inputs rounds each step
/// to 2^-149, and a norm multiplies that by up to 1/sqrt(eps) ~ 2^10).
/// Far below any value but a subnormal row's outputs.
fn subnormal_floor(dtype: DType) -> f64 {
    let f32_tiny = 2f64.powi(-149);
    let storage_tiny = match dtype {
        DType::F32 => f32_tiny,
        DType::Bf16 => 2f64.powi(-133),
        DType::F16 => 2f64.powi(-24),
    };
    storage_tiny + 8192.0 * f32_tiny
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
        } = compare(
            got,
            want,
            expected.scale.as_deref(),
            dtype.max_finite() * (1.0 - tolerance),
            subnormal_floor(dtype),
        );
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

    fn expected(values: Vec<f64>) -> Reference {
        let mut r = Reference::new();
        r.insert(
            "y".into(),
            crate::reference::Expected {
                values,
                scale: None,
            },
        );
        r
    }

    fn judged(dtype: DType, got: &[f32], want: &[f64]) -> OutputCheck {
        let mut out = Buffers::new();
        out.insert("y".into(), Tensor::from_f32(dtype, got));
        validate(dtype, &out, &expected(want.to_vec())).outputs[0].clone()
    }

    #[test]
    fn non_finite_expected_values_must_be_met_in_kind_and_place() {
        let (nan, inf) = (f64::NAN, f64::INFINITY);
        let want = [1.0, nan, inf, -inf, 2.0];
        let exact = [1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 2.0];
        let c = judged(DType::F32, &exact, &want);
        assert!(c.pass && c.nonfinite == 0 && c.rel_err == 0.0, "{c:?}");
        // The tolerance applies to the finite part alone.
        let near = [1.0 + 1e-7, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 2.0];
        assert!(judged(DType::F32, &near, &want).pass);
        for wrong in [
            [1.0, 0.0, f32::INFINITY, f32::NEG_INFINITY, 2.0],
            [1.0, f32::NAN, f32::NEG_INFINITY, f32::NEG_INFINITY, 2.0],
            [1.0, f32::NAN, f32::NAN, f32::NEG_INFINITY, 2.0],
            [1.0, f32::NAN, f32::INFINITY, -3.0e38, 2.0],
            [f32::NAN, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 2.0],
            [
                1.0,
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::INFINITY,
            ],
        ] {
            let c = judged(DType::F32, &wrong, &want);
            assert!(!c.pass && c.nonfinite == 1, "{wrong:?}: {c:?}");
        }
    }

    #[test]
    fn a_finite_value_beyond_the_storage_range_may_round_to_infinity() {
        // 1e5 is past f16's 65504: the infinity of its sign is the rounding.
        assert!(judged(DType::F16, &[f32::INFINITY, 1.0], &[1e5, 1.0]).pass);
        assert!(!judged(DType::F16, &[f32::NEG_INFINITY, 1.0], &[1e5, 1.0]).pass);
        assert!(!judged(DType::F16, &[f32::INFINITY, 1.0], &[6e4, 1.0]).pass);
        assert!(!judged(DType::F32, &[f32::INFINITY, 1.0], &[1e5, 1.0]).pass);
    }

    #[test]
    fn subnormal_outputs_are_judged_at_their_resolution() {
        // 3 x 2^-149 against 3.4 x 2^-149: 12% off, within the floor.
        let t = 2f64.powi(-149);
        let got = [(3.0 * t) as f32; 4];
        assert!(judged(DType::F32, &got, &[3.4 * t; 4]).pass);
        assert!(!judged(DType::F32, &[1e-30; 4], &[1.1e-30; 4]).pass);
    }
}
