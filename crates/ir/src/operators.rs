//! The six operators, written as row programs (plus `add`, an element-only
//! program used as a copy-bandwidth baseline and to exercise refusals), and
//! the input gradients (dx) of five of them, row programs too, and cross
//! entropy's loss with its dx in one program.
//!
//! Cross entropy's saved log-sum-exp is two operators, not an
//! `OperatorOptions` field: the name of an operator is what results,
//! tuning keys, replays, the peers and the selftest identify a problem by,
//! and the saved-statistic backward reads different inputs at a different
//! cost (x once, not twice), while options stand for per-column inputs a
//! peer's PyTorch module lacks (a bench with any refuses the peers), which
//! would bar the training form from the comparisons it exists for.

use crate::program::{BinaryOp, BufferKind, Builder, Program, ReduceOp, RowStat, UnaryOp};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

pub const RMSNORM_EPS: f32 = 1e-6;
pub const LAYERNORM_EPS: f32 = 1e-5;
pub const IGNORE_INDEX: i64 = -100;
/// Rows per group of the first pass of the norms' column gradients
/// (dweight, dbias): part of their summation order, on every backend.
pub const COLUMN_GROUP_ROWS: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operator {
    Sum,
    Softmax,
    Rmsnorm,
    Layernorm,
    ResidualLayernorm,
    CrossEntropy,
    /// y = x + r: element-only.
    Add,
    /// dx of rmsnorm from x, dy (and weight).
    RmsnormBackward,
    /// dx of layernorm from x, dy (and weight); mean and rstd recomputed.
    LayernormBackward,
    /// dx (= d residual) of residual_layernorm from h, dy, dh (and weight).
    ResidualLayernormBackward,
    /// dx of softmax from its output y and dy.
    SoftmaxBackward,
    /// dlogits of cross_entropy from the logits x, target, the
    /// forward's saved log-sum-exp `lse` ([`Operator::CrossEntropyWithLse`])
    /// and the per-row incoming gradient dloss: `(exp(x - lse) -
    /// onehot(target)) * g`, g = 0 on an ignored row. Element-only: one
    /// read of x, one write of dx. What training runs after a forward that
    /// saved lse, as PyTorch's own backwards do.
    CrossEntropyBackward,
    /// cross_entropy's dlogits with the row's maximum and sum of
    /// exponentials recomputed from x (no saved statistic): three phases.
    CrossEntropyBackwardRecompute,
    /// cross_entropy's loss and, in the same pass, its dlogits for the
    /// per-row gradient dloss the loss will receive (known at forward time
    /// for a mean or a sum): the backward then needs no second read of x.
    CrossEntropyWithGrad,
    /// cross_entropy's loss and the row's log-sum-exp (f32) for
    /// [`Operator::CrossEntropyBackward`]: the forward a training step
    /// runs. 4 bytes a row more than `cross_entropy`, whose program stays
    /// as it is for inference.
    CrossEntropyWithLse,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown operator '{0}' (expected one of: sum, softmax, rmsnorm, layernorm, residual_layernorm, cross_entropy, add, rmsnorm_backward, layernorm_backward, residual_layernorm_backward, softmax_backward, cross_entropy_backward, cross_entropy_backward_recompute, cross_entropy_with_grad, cross_entropy_with_lse)")]
pub struct ParseOperatorError(pub String);

/// Optional per-column inputs. PyTorch's defaults have both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorOptions {
    pub weight: bool,
    pub bias: bool,
}

impl Default for OperatorOptions {
    fn default() -> Self {
        OperatorOptions {
            weight: true,
            bias: true,
        }
    }
}

impl OperatorOptions {
    /// These options with every input `op` does not have reset to the
    /// default, so `softmax` asked for "no weight" is plain softmax.
    pub fn applied_to(self, op: Operator) -> OperatorOptions {
        let (has_weight, has_bias) = match op {
            Operator::Rmsnorm
            | Operator::RmsnormBackward
            | Operator::LayernormBackward
            | Operator::ResidualLayernormBackward => (true, false),
            Operator::Layernorm | Operator::ResidualLayernorm => (true, true),
            _ => (false, false),
        };
        OperatorOptions {
            weight: self.weight || !has_weight,
            bias: self.bias || !has_bias,
        }
    }

    /// `op`'s name, with what these options leave out of it:
    /// `layernorm(no weight, no bias)`; the bare name for PyTorch's default.
    pub fn label(self, op: Operator) -> String {
        let applied = self.applied_to(op);
        let mut left_out = vec![];
        if !applied.weight {
            left_out.push("no weight");
        }
        if !applied.bias {
            left_out.push("no bias");
        }
        if left_out.is_empty() {
            op.name().to_string()
        } else {
            format!("{}({})", op.name(), left_out.join(", "))
        }
    }
}

impl Operator {
    /// The second Row input residual_layernorm adds to x.
    fn residual(self) -> Option<&'static str> {
        (self == Operator::ResidualLayernorm).then_some("residual")
    }

    /// The six reduction operators of the mission.
    pub const SIX: [Operator; 6] = [
        Operator::Sum,
        Operator::Softmax,
        Operator::Rmsnorm,
        Operator::Layernorm,
        Operator::ResidualLayernorm,
        Operator::CrossEntropy,
    ];

    /// The input gradients, one per operator that has one (sum's is a
    /// broadcast, not a row program worth a kernel; cross_entropy's in both
    /// forms), and cross_entropy's loss with its gradient.
    pub const BACKWARD: [Operator; 7] = [
        Operator::RmsnormBackward,
        Operator::LayernormBackward,
        Operator::ResidualLayernormBackward,
        Operator::SoftmaxBackward,
        Operator::CrossEntropyBackward,
        Operator::CrossEntropyBackwardRecompute,
        Operator::CrossEntropyWithGrad,
    ];

    /// Forwards that also write what their backward reads.
    pub const SAVING: [Operator; 1] = [Operator::CrossEntropyWithLse];

    /// The backward operators and the saving forwards: what a training
    /// step runs besides the six.
    pub fn training() -> impl Iterator<Item = Operator> {
        Operator::BACKWARD.into_iter().chain(Operator::SAVING)
    }

    /// The operator whose input gradient this is; None for a forward one.
    pub fn forward(self) -> Option<Operator> {
        Some(match self {
            Operator::RmsnormBackward => Operator::Rmsnorm,
            Operator::LayernormBackward => Operator::Layernorm,
            Operator::ResidualLayernormBackward => Operator::ResidualLayernorm,
            Operator::SoftmaxBackward => Operator::Softmax,
            Operator::CrossEntropyBackward
            | Operator::CrossEntropyBackwardRecompute
            | Operator::CrossEntropyWithGrad => Operator::CrossEntropy,
            _ => return None,
        })
    }

    /// The input gradient a training step runs after this forward (cross
    /// entropy's reads the saved log-sum-exp, as PyTorch's does); None
    /// for a backward operator and for `sum` and `add`.
    pub fn input_gradient(self) -> Option<Operator> {
        Some(match self {
            Operator::Rmsnorm => Operator::RmsnormBackward,
            Operator::Layernorm => Operator::LayernormBackward,
            Operator::ResidualLayernorm => Operator::ResidualLayernormBackward,
            Operator::Softmax => Operator::SoftmaxBackward,
            Operator::CrossEntropy => Operator::CrossEntropyBackward,
            _ => return None,
        })
    }

    /// Does this operator's forward program carry the norms' cold path
    /// ([`NormForm::cold_path`]) unless a schedule opts out?
    pub fn has_cold_path(self) -> bool {
        matches!(
            self,
            Operator::Rmsnorm | Operator::Layernorm | Operator::ResidualLayernorm
        )
    }

    /// The PyTorch default eps of a norm and its gradient, which the
    /// program carries ([`crate::Program::norm_eps`]); None elsewhere.
    pub fn default_eps(self) -> Option<f32> {
        match self {
            Operator::Rmsnorm | Operator::RmsnormBackward => Some(RMSNORM_EPS),
            Operator::Layernorm
            | Operator::ResidualLayernorm
            | Operator::LayernormBackward
            | Operator::ResidualLayernormBackward => Some(LAYERNORM_EPS),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Operator::Sum => "sum",
            Operator::Softmax => "softmax",
            Operator::Rmsnorm => "rmsnorm",
            Operator::Layernorm => "layernorm",
            Operator::ResidualLayernorm => "residual_layernorm",
            Operator::CrossEntropy => "cross_entropy",
            Operator::Add => "add",
            Operator::RmsnormBackward => "rmsnorm_backward",
            Operator::LayernormBackward => "layernorm_backward",
            Operator::ResidualLayernormBackward => "residual_layernorm_backward",
            Operator::SoftmaxBackward => "softmax_backward",
            Operator::CrossEntropyBackward => "cross_entropy_backward",
            Operator::CrossEntropyBackwardRecompute => "cross_entropy_backward_recompute",
            Operator::CrossEntropyWithGrad => "cross_entropy_with_grad",
            Operator::CrossEntropyWithLse => "cross_entropy_with_lse",
        }
    }

    pub fn program(self, opts: OperatorOptions) -> Program {
        let mut b = Builder::new(self.name());
        match self {
            Operator::Sum => {
                let x = b.input("x", BufferKind::Row);
                let s = b.reduce(ReduceOp::Sum, x);
                b.output("y", BufferKind::RowScalar, s);
            }
            Operator::Softmax => {
                let x = b.input("x", BufferKind::Row);
                let (_, e, s) = exp_sum(&mut b, x);
                // One reciprocal per row, then a multiply per element: a
                // per-element IEEE divide costs ~10 instructions on the GPU.
                let r = b.unary(UnaryOp::Recip, s);
                let rb = b.broadcast(r);
                let y = b.mul(e, rb);
                b.output("y", BufferKind::Row, y);
            }
            Operator::Rmsnorm => rms_norm_body(&mut b, opts, false),
            Operator::Layernorm | Operator::ResidualLayernorm => {
                let x = b.input("x", BufferKind::Row);
                let h = if self == Operator::ResidualLayernorm {
                    residual_sum(&mut b, x)
                } else {
                    x
                };
                layer_norm_body(&mut b, h, opts, None, false);
            }
            Operator::CrossEntropy => {
                let row = CrossEntropyRow::new(&mut b);
                row.loss(&mut b);
            }
            Operator::CrossEntropyWithLse => {
                // The forward, instruction for instruction, then one store.
                let row = CrossEntropyRow::new(&mut b);
                let lse = row.loss(&mut b);
                // m - m is NaN where the row's max is not finite, 0 else:
                // a fully -inf row stores NaN in both normalizer forms
                // (the online one's sum is 0 there, its lse -inf).
                let undefined = b.sub(row.m, row.m);
                let saved = b.add(lse, undefined);
                b.output("lse", BufferKind::RowScalarF32, saved);
            }
            Operator::Add => {
                let x = b.input("x", BufferKind::Row);
                let r = b.input("residual", BufferKind::Row);
                let y = b.add(x, r);
                b.output("y", BufferKind::Row, y);
            }
            Operator::RmsnormBackward => {
                // dx = rstd*g - x * (rstd^3 * sum(g*x) / N), g = w*dy: both
                // sums in the first phase, then the output.
                let x = b.input("x", BufferKind::Row);
                let g = weighted_dy(&mut b, opts);
                let sq = b.unary(UnaryOp::Square, x);
                let ss = b.reduce(ReduceOp::Sum, sq);
                let gx = b.mul(g, x);
                let sgx = b.reduce(ReduceOp::Sum, gx);
                let n = b.row_len();
                let ms = b.div(ss, n);
                let eps = b.constant(RMSNORM_EPS);
                let v = b.add(ms, eps);
                let r = b.unary(UnaryOp::Rsqrt, v);
                let r2 = b.unary(UnaryOp::Square, r);
                let r3 = b.mul(r2, r);
                let t = b.mul(r3, sgx);
                let c = b.div(t, n);
                let rb = b.broadcast(r);
                let cb = b.broadcast(c);
                let a = b.mul(g, rb);
                let xc = b.mul(x, cb);
                let dx = b.sub(a, xc);
                b.output("dx", BufferKind::Row, dx);
            }
            Operator::LayernormBackward => {
                let x = b.input("x", BufferKind::Row);
                let dx = layer_norm_dx(&mut b, x, opts);
                b.output("dx", BufferKind::Row, dx);
            }
            Operator::ResidualLayernormBackward => {
                // dx and d residual are one tensor: the layernorm dx of h
                // plus the gradient h itself receives.
                let h = b.input("h", BufferKind::Row);
                b.declare_input("dh", BufferKind::Row);
                let dx = layer_norm_dx(&mut b, h, opts);
                let dh = b.load("dh");
                let out = b.add(dx, dh);
                b.output("dx", BufferKind::Row, out);
            }
            Operator::SoftmaxBackward => {
                // dx = y * (dy - sum(y*dy)).
                let y = b.input("y", BufferKind::Row);
                let dy = b.input("dy", BufferKind::Row);
                let p = b.mul(y, dy);
                let s = b.reduce(ReduceOp::Sum, p);
                let sb = b.broadcast(s);
                let d = b.sub(dy, sb);
                let dx = b.mul(y, d);
                b.output("dx", BufferKind::Row, dx);
            }
            Operator::CrossEntropyBackward => {
                // torch's log_softmax backward from the saved statistic:
                // exp(x - lse) * g - onehot * g. A row whose softmax is
                // undefined (a NaN, a +inf, every entry -inf) has a
                // non-finite lse; lse + (lse - lse) makes it NaN, so the
                // whole row is NaN, ignored or not, as torch's is.
                let x = b.input("x", BufferKind::Row);
                let t = b.input("target", BufferKind::RowIndex);
                let saved = b.input("lse", BufferKind::RowScalarF32);
                let g = ignored_as_zero(&mut b, t);
                let undefined = b.sub(saved, saved);
                let lse = b.add(saved, undefined);
                let lb = b.broadcast(lse);
                let d = b.sub(x, lb);
                let p = b.unary(UnaryOp::Exp, d);
                let gb = b.broadcast(g);
                let pg = b.mul(p, gb);
                let onehot = b.mask_index(gb, t);
                let dx = b.sub(pg, onehot);
                b.output("dx", BufferKind::Row, dx);
            }
            Operator::CrossEntropyBackwardRecompute => {
                let row = CrossEntropyRow::new(&mut b);
                row.dx(&mut b);
            }
            Operator::CrossEntropyWithGrad => {
                // The forward's loss and the backward's dx over one
                // maximum and one sum of exponentials.
                let row = CrossEntropyRow::new(&mut b);
                row.loss(&mut b);
                row.dx(&mut b);
            }
        }
        b.finish()
    }
}

/// A row's maximum `m`, `e = exp(x - m)` and `sum(e)`: softmax's
/// normalizer, in the form the online normalizer recognises.
fn exp_sum(b: &mut Builder, x: crate::Value) -> (crate::Value, crate::Value, crate::Value) {
    let m = b.reduce(ReduceOp::Max, x);
    let mb = b.broadcast(m);
    let d = b.sub(x, mb);
    let e = b.unary(UnaryOp::Exp, d);
    let s = b.reduce(ReduceOp::Sum, e);
    (m, e, s)
}

/// Cross entropy's inputs x and target and the softmax normalizer of x,
/// shared by its loss and its dx.
struct CrossEntropyRow {
    x: crate::Value,
    t: crate::Value,
    m: crate::Value,
    e: crate::Value,
    s: crate::Value,
}

impl CrossEntropyRow {
    fn new(b: &mut Builder) -> Self {
        let x = b.input("x", BufferKind::Row);
        let t = b.input("target", BufferKind::RowIndex);
        let (m, e, s) = exp_sum(b, x);
        CrossEntropyRow { x, t, m, e, s }
    }

    /// `loss = log(sum(e)) + m - x[target]`, 0 on an ignored row; returns
    /// the row's log-sum-exp.
    fn loss(&self, b: &mut Builder) -> crate::Value {
        let ls = b.unary(UnaryOp::Log, self.s);
        let lse = b.add(ls, self.m);
        let picked = b.mask_index(self.x, self.t);
        let xt = b.reduce(ReduceOp::Sum, picked);
        let loss = b.sub(lse, xt);
        let zero = b.constant(0.0);
        let out = b.select_index_eq(self.t, IGNORE_INDEX, zero, loss);
        b.output("loss", BufferKind::RowScalar, out);
        lse
    }

    /// `dx = (softmax(x) - onehot(target)) * g`, g the per-row input
    /// `dloss`, or 0 on an ignored row.
    fn dx(&self, b: &mut Builder) {
        let g = ignored_as_zero(b, self.t);
        let r = b.unary(UnaryOp::Recip, self.s);
        let rg = b.mul(r, g);
        let rgb = b.broadcast(rg);
        let p = b.mul(self.e, rgb);
        let gb = b.broadcast(g);
        let onehot = b.mask_index(gb, self.t);
        let dx = b.sub(p, onehot);
        b.output("dx", BufferKind::Row, dx);
    }
}

/// The per-row input `dloss`, 0 on a row whose target is ignored.
fn ignored_as_zero(b: &mut Builder, t: crate::Value) -> crate::Value {
    let dl = b.input("dloss", BufferKind::RowScalar);
    let zero = b.constant(0.0);
    b.select_index_eq(t, IGNORE_INDEX, zero, dl)
}

/// `dy * weight`, or `dy` without a weight.
fn weighted_dy(b: &mut Builder, opts: OperatorOptions) -> crate::Value {
    let dy = b.input("dy", BufferKind::Row);
    if opts.weight {
        let w = b.input("weight", BufferKind::Column);
        b.mul(dy, w)
    } else {
        dy
    }
}

/// layernorm's dx of the row `x` with mean and rstd recomputed:
/// `rstd * (g - mean(g) - c * rstd^2 * mean(g*c))`, c = x - mean,
/// g = w*dy. Three phases like the forward: mean and sum(g); the
/// variance and sum(g*c); the output.
fn layer_norm_dx(b: &mut Builder, x: crate::Value, opts: OperatorOptions) -> crate::Value {
    let g = weighted_dy(b, opts);
    let n = b.row_len();
    let s = b.reduce(ReduceOp::Sum, x);
    let sg = b.reduce(ReduceOp::Sum, g);
    let mean = b.div(s, n);
    let mb = b.broadcast(mean);
    let c = b.sub(x, mb);
    let sq = b.unary(UnaryOp::Square, c);
    let ss = b.reduce(ReduceOp::Sum, sq);
    let gc = b.mul(g, c);
    let sgc = b.reduce(ReduceOp::Sum, gc);
    let var = b.div(ss, n);
    let eps = b.constant(LAYERNORM_EPS);
    let ve = b.add(var, eps);
    let rstd = b.unary(UnaryOp::Rsqrt, ve);
    let mg = b.div(sg, n);
    let r2 = b.unary(UnaryOp::Square, rstd);
    let r2s = b.mul(r2, sgc);
    let k = b.div(r2s, n);
    let mgb = b.broadcast(mg);
    let kb = b.broadcast(k);
    let rb = b.broadcast(rstd);
    let t1 = b.sub(g, mgb);
    let t2 = b.mul(c, kb);
    let t3 = b.sub(t1, t2);
    b.mul(t3, rb)
}

/// How layernorm and residual_layernorm compute their moments and output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NormForm {
    /// Both moments summed in one pass about the row's first element
    /// ([`Operator::program_one_pass_moments`]).
    pub one_pass_moments: bool,
    /// The output as `h * rstd + (-(mean * rstd))`, one fused multiply-add
    /// per element where `(h - mean) * rstd` takes two operations. The
    /// product `mean * rstd` is rounded once per row, so each output
    /// carries an extra absolute error of about `2^-24 * |mean| / std`:
    /// invisible under 16-bit outputs' rounding (2^-8 relative), but f32's
    /// 1e-5 tolerance would see it on rows offset by ~1000 spreads, so
    /// only 16-bit rows take it (see `Problem::as_requested`).
    pub fused_output: bool,
    /// A rare cold path for rows the fast statistics get wrong
    /// ([`crate::Instr::Rescaled`]); rmsnorm too.
    pub cold_path: bool,
}

impl Operator {
    /// layernorm and residual_layernorm with both moments in one pass: the
    /// row is shifted by its first element `k` (of h, for the residual
    /// form), `d = h - k` and `d*d` are summed in the same phase, and
    /// `mean = k + E[d]`, `var = max(E[d^2] - E[d]^2, 0)`. Two phases like
    /// rmsnorm's instead of three; the shift keeps the cancellation small
    /// (a row's own element is within a few standard deviations of its
    /// mean). None for the other operators.
    pub fn program_one_pass_moments(self, opts: OperatorOptions) -> Option<Program> {
        self.program_norm_form(
            opts,
            NormForm {
                one_pass_moments: true,
                ..NormForm::default()
            },
        )
    }

    /// layernorm and residual_layernorm (rmsnorm: only its cold path) in
    /// the given [`NormForm`]; None for the other operators. The default
    /// form is [`Operator::program`]'s.
    pub fn program_norm_form(self, opts: OperatorOptions, form: NormForm) -> Option<Program> {
        if self == Operator::Rmsnorm {
            let mut b = Builder::new(self.name());
            rms_norm_body(&mut b, opts, form.cold_path);
            return Some(b.finish());
        }
        if !matches!(self, Operator::Layernorm | Operator::ResidualLayernorm) {
            return None;
        }
        let cold = form.cold_path.then_some(self.residual());
        let mut b = Builder::new(self.name());
        let x = b.input("x", BufferKind::Row);
        let h = if self == Operator::ResidualLayernorm {
            residual_sum(&mut b, x)
        } else {
            x
        };
        if !form.one_pass_moments {
            layer_norm_body(&mut b, h, opts, cold, form.fused_output);
            return Some(b.finish());
        }
        let k = match self {
            Operator::Layernorm => b.row_first("x"),
            _ => {
                let (x0, r0) = (b.row_first("x"), b.row_first("residual"));
                let k0 = b.add(x0, r0);
                b.round_to_storage(k0)
            }
        };
        let n = b.row_len();
        let kb = b.broadcast(k);
        let d = b.sub(h, kb);
        let s1 = b.reduce(ReduceOp::Sum, d);
        let dd = b.unary(UnaryOp::Square, d);
        let s2 = b.reduce(ReduceOp::Sum, dd);
        let m1 = b.div(s1, n);
        let m2 = b.div(s2, n);
        let m1sq = b.unary(UnaryOp::Square, m1);
        let raw = b.sub(m2, m1sq);
        let zero = b.constant(0.0);
        let var = b.binary(BinaryOp::Max, raw, zero);
        let eps = b.constant(LAYERNORM_EPS);
        let ve = b.add(var, eps);
        let mut rstd = b.unary(UnaryOp::Rsqrt, ve);
        let mean = b.add(m1, k);
        if let Some(residual) = cold {
            // The unclamped variance: NaN where the row holds an infinity.
            rstd = b.rescaled(RowStat::LnRstd, (raw, Some(mean)), rstd, "x", residual);
        }
        if form.fused_output {
            fused_output(&mut b, h, mean, rstd, opts);
        } else {
            let mb = b.broadcast(mean);
            let c = b.sub(h, mb);
            normalized_output(&mut b, c, rstd, opts);
        }
        Some(b.finish())
    }
}

/// rmsnorm; with `cold`, a row whose sum of squares is not finite takes
/// the cold path ([`NormForm::cold_path`]).
fn rms_norm_body(b: &mut Builder, opts: OperatorOptions, cold: bool) {
    let x = b.input("x", BufferKind::Row);
    let sq = b.unary(UnaryOp::Square, x);
    let ss = b.reduce(ReduceOp::Sum, sq);
    let n = b.row_len();
    let ms = b.div(ss, n);
    let eps = b.constant(RMSNORM_EPS);
    let v = b.add(ms, eps);
    let mut r = b.unary(UnaryOp::Rsqrt, v);
    if cold {
        r = b.rescaled(RowStat::RmsRstd, (ss, None), r, "x", None);
    }
    let rb = b.broadcast(r);
    let mut y = b.mul(x, rb);
    if opts.weight {
        let w = b.input("weight", BufferKind::Column);
        y = b.mul(y, w);
    }
    b.output("y", BufferKind::Row, y);
}

/// layernorm's moments and output of `x`; with `cold` (the second Row
/// input, if any), overflowing, non-finite and far-offset rows take the
/// cold path ([`NormForm::cold_path`]).
fn layer_norm_body(
    b: &mut Builder,
    x: crate::Value,
    opts: OperatorOptions,
    cold: Option<Option<&str>>,
    fused: bool,
) {
    let n = b.row_len();
    let s = b.reduce(ReduceOp::Sum, x);
    let mean = b.div(s, n);
    let mb = b.broadcast(mean);
    let c = b.sub(x, mb);
    let sq = b.unary(UnaryOp::Square, c);
    let ss = b.reduce(ReduceOp::Sum, sq);
    let var = b.div(ss, n);
    let eps = b.constant(LAYERNORM_EPS);
    let ve = b.add(var, eps);
    let mut rstd = b.unary(UnaryOp::Rsqrt, ve);
    if let Some(residual) = cold {
        rstd = b.rescaled(RowStat::LnRstd, (var, Some(mean)), rstd, "x", residual);
    }
    if fused {
        fused_output(b, x, mean, rstd, opts);
    } else {
        normalized_output(b, c, rstd, opts);
    }
}

/// residual_layernorm's `h = x + residual`, rounded to the storage dtype
/// (PyTorch materializes h first) and stored as the output `h`.
fn residual_sum(b: &mut Builder, x: crate::Value) -> crate::Value {
    let r = b.input("residual", BufferKind::Row);
    let sum = b.add(x, r);
    let h = b.round_to_storage(sum);
    b.output("h", BufferKind::Row, h);
    h
}

/// layernorm's output `y = c * rstd (* weight) (+ bias)` from the centred
/// row `c` and the per-row `rstd`.
fn normalized_output(b: &mut Builder, c: crate::Value, rstd: crate::Value, opts: OperatorOptions) {
    let rb = b.broadcast(rstd);
    let y = b.mul(c, rb);
    columns_and_store(b, y, opts);
}

/// `y (* weight) (+ bias)`, stored as the output `y`.
fn columns_and_store(b: &mut Builder, mut y: crate::Value, opts: OperatorOptions) {
    if opts.weight {
        let w = b.input("weight", BufferKind::Column);
        y = b.mul(y, w);
    }
    if opts.bias {
        let bias = b.input("bias", BufferKind::Column);
        y = b.add(y, bias);
    }
    b.output("y", BufferKind::Row, y);
}

/// layernorm's output in the fused form ([`NormForm::fused_output`]):
/// `y = h * rstd + (-(mean * rstd))`, then weight and bias as
/// [`normalized_output`] applies them. The only negation in any operator
/// program: `Plan::fused_output` recognises the form by it.
fn fused_output(
    b: &mut Builder,
    h: crate::Value,
    mean: crate::Value,
    rstd: crate::Value,
    opts: OperatorOptions,
) {
    let shift = b.mul(mean, rstd);
    let neg_shift = b.unary(UnaryOp::Neg, shift);
    let rb = b.broadcast(rstd);
    let sb = b.broadcast(neg_shift);
    let scaled = b.mul(h, rb);
    let y = b.add(scaled, sb);
    columns_and_store(b, y, opts);
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Operator {
    type Err = ParseOperatorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut all = Operator::SIX
            .into_iter()
            .chain([Operator::Add])
            .chain(Operator::training());
        all.find(|o| o.name() == s.trim())
            .ok_or_else(|| ParseOperatorError(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::Instr;
    use crate::verify::VerifyError;

    #[test]
    fn every_operator_verifies() {
        for op in Operator::SIX.iter().chain([Operator::Add].iter()) {
            for weight in [false, true] {
                let p = op.program(OperatorOptions { weight, bias: true });
                p.verify()
                    .unwrap_or_else(|e| panic!("{op}: {e}\n{}", p.to_text()));
            }
        }
    }

    /// Every norm program, in every form, has one eps (the PyTorch default)
    /// that `set_norm_eps` finds and replaces; the others have none.
    #[test]
    fn every_norm_form_has_one_eps_that_can_be_set() {
        let ops = Operator::SIX.into_iter().chain(Operator::BACKWARD);
        for op in ops {
            let default = op.default_eps();
            let opts = OperatorOptions::default();
            let mut forms = vec![op.program(opts)];
            for bits in 0..8u8 {
                let form = NormForm {
                    one_pass_moments: bits & 1 != 0,
                    fused_output: bits & 2 != 0,
                    cold_path: bits & 4 != 0,
                };
                forms.extend(op.program_norm_form(opts, form));
            }
            for mut p in forms {
                assert_eq!(p.norm_eps(), default, "{op}\n{}", p.to_text());
                assert_eq!(p.set_norm_eps(0.25), default.is_some(), "{op}");
                if default.is_some() {
                    assert_eq!(p.norm_eps(), Some(0.25), "{op}");
                }
            }
        }
    }

    #[test]
    fn options_apply_only_to_the_inputs_an_operator_has() {
        let none = OperatorOptions {
            weight: false,
            bias: false,
        };
        assert_eq!(none.label(Operator::Softmax), "softmax");
        assert_eq!(
            none.applied_to(Operator::Softmax),
            OperatorOptions::default()
        );
        assert_eq!(none.label(Operator::Rmsnorm), "rmsnorm(no weight)");
        assert!(none.applied_to(Operator::Rmsnorm).bias);
        assert_eq!(
            none.label(Operator::ResidualLayernorm),
            "residual_layernorm(no weight, no bias)"
        );
        let no_bias = OperatorOptions {
            weight: true,
            bias: false,
        };
        assert_eq!(no_bias.label(Operator::Layernorm), "layernorm(no bias)");
        assert_eq!(
            OperatorOptions::default().label(Operator::Layernorm),
            "layernorm"
        );
    }

    #[test]
    fn softmax_keeps_only_its_input_resident_and_has_three_phases() {
        let p = Operator::Softmax.program(OperatorOptions::default());
        let a = p.verify().unwrap();
        assert_eq!(a.num_phases, 3);
        assert_eq!(a.resident.len(), 1);
        assert!(matches!(&p.body[a.resident[0].index()], Instr::Load { buffer } if buffer == "x"));
    }

    #[test]
    fn the_online_normalizer_takes_one_tree_from_softmax_and_a_pass_from_cross_entropy() {
        let softmax = Operator::Softmax.program(OperatorOptions::default());
        let online = softmax
            .with_online_normalizer()
            .expect("softmax has the pattern");
        let a = online.verify().unwrap();
        assert_eq!(
            a.num_phases, 2,
            "max and sum of exp in one pass, then the output"
        );
        assert_eq!(a.reductions.len(), 2);
        assert_eq!(a.resident.len(), 1, "x is still read again for the output");
        let ce = Operator::CrossEntropy.program(OperatorOptions::default());
        let a = ce.with_online_normalizer().unwrap().verify().unwrap();
        assert!(a.resident.is_empty(), "cross_entropy reads x once");
        assert_eq!(a.num_phases, 2, "one accumulating phase, then scalars");
        for op in [Operator::Sum, Operator::Rmsnorm, Operator::Layernorm] {
            assert!(op
                .program(OperatorOptions::default())
                .with_online_normalizer()
                .is_none());
        }
    }

    #[test]
    fn one_pass_moments_give_layernorm_rmsnorms_two_phases() {
        for op in [Operator::Layernorm, Operator::ResidualLayernorm] {
            for (weight, bias) in [(true, true), (false, false)] {
                let opts = OperatorOptions { weight, bias };
                let two_pass = op.program(opts);
                let one_pass = op.program_one_pass_moments(opts).unwrap();
                assert_eq!(two_pass.verify().unwrap().num_phases, 3, "{op}");
                let a = one_pass.verify().unwrap();
                assert_eq!(a.num_phases, 2, "{op}");
                assert_eq!(a.reductions.len(), 2, "{op}: both sums in one tree");
                // The same buffers in the same order: kernels bind them alike.
                assert_eq!(one_pass.inputs, two_pass.inputs, "{op}");
                assert_eq!(one_pass.outputs, two_pass.outputs, "{op}");
            }
        }
        assert!(Operator::Softmax
            .program_one_pass_moments(OperatorOptions::default())
            .is_none());
    }

    /// The fused output form keeps each form's phases and buffers and
    /// negates once per row (the marker `Plan::fused_output` reads); no
    /// other operator program negates anything.
    #[test]
    fn the_fused_output_form_keeps_phases_and_buffers_and_alone_negates() {
        let negates = |p: &Program| {
            p.body.iter().any(|i| {
                matches!(
                    i,
                    Instr::Unary {
                        op: UnaryOp::Neg,
                        ..
                    }
                )
            })
        };
        let opts = OperatorOptions::default();
        for op in [Operator::Layernorm, Operator::ResidualLayernorm] {
            for one_pass_moments in [false, true] {
                let plain = op
                    .program_norm_form(
                        opts,
                        NormForm {
                            one_pass_moments,
                            ..NormForm::default()
                        },
                    )
                    .unwrap();
                let fused = op
                    .program_norm_form(
                        opts,
                        NormForm {
                            one_pass_moments,
                            fused_output: true,
                            cold_path: false,
                        },
                    )
                    .unwrap();
                let (a, b) = (plain.verify().unwrap(), fused.verify().unwrap());
                assert_eq!(a.num_phases, b.num_phases, "{op}");
                assert_eq!(a.reductions.len(), b.reductions.len(), "{op}");
                assert_eq!(plain.inputs, fused.inputs, "{op}");
                assert_eq!(plain.outputs, fused.outputs, "{op}");
                assert!(!negates(&plain) && negates(&fused), "{op}");
            }
            // The default form is `program`'s, instruction for instruction.
            assert_eq!(
                op.program_norm_form(opts, NormForm::default())
                    .unwrap()
                    .to_text(),
                op.program(opts).to_text()
            );
        }
        for op in Operator::SIX {
            assert!(!negates(&op.program(opts)), "{op}");
        }
        // rmsnorm has only the cold path among the forms; sum none.
        let fused = NormForm {
            fused_output: true,
            ..NormForm::default()
        };
        assert_eq!(
            Operator::Rmsnorm
                .program_norm_form(opts, fused)
                .unwrap()
                .to_text(),
            Operator::Rmsnorm.program(opts).to_text()
        );
        assert!(Operator::Sum.program_norm_form(opts, fused).is_none());
    }

    /// The cold path adds one `rescaled` after the last reduction of each
    /// norm's every form; the default forms carry none.
    #[test]
    fn the_cold_path_is_one_rescaled_instruction_after_the_last_reduction() {
        let opts = OperatorOptions::default();
        for op in [
            Operator::Rmsnorm,
            Operator::Layernorm,
            Operator::ResidualLayernorm,
        ] {
            assert!(!op.program(opts).to_text().contains("rescaled"), "{op}");
            for (one_pass_moments, fused_output) in [(false, false), (true, false), (true, true)] {
                let form = NormForm {
                    one_pass_moments,
                    fused_output,
                    cold_path: true,
                };
                let p = op.program_norm_form(opts, form).unwrap();
                p.verify().unwrap();
                let at: Vec<usize> = p
                    .body
                    .iter()
                    .enumerate()
                    .filter(|(_, i)| matches!(i, Instr::Rescaled { .. }))
                    .map(|(at, _)| at)
                    .collect();
                assert_eq!(at.len(), 1, "{op}");
                let last_reduce = p
                    .body
                    .iter()
                    .rposition(|i| matches!(i, Instr::Reduce { .. }))
                    .unwrap();
                assert!(at[0] > last_reduce, "{op}");
            }
        }
    }

    #[test]
    fn row_first_takes_a_row_input() {
        let mut b = Builder::new("bad");
        let w = b.input("w", BufferKind::Column);
        let k = b.row_first("w");
        let s = b.reduce(ReduceOp::Sum, w);
        let t = b.add(s, k);
        b.output("out", BufferKind::RowScalar, t);
        assert!(matches!(
            b.finish().verify(),
            Err(VerifyError::KindMismatch { .. })
        ));
    }

    /// The cold path skips the rest of its row: a reduction after it would
    /// leave the row's other workers waiting, so the verifier refuses one.
    #[test]
    fn rescaled_must_follow_the_last_reduction() {
        let mut b = Builder::new("bad");
        let x = b.input("x", BufferKind::Row);
        let s = b.reduce(ReduceOp::Sum, x);
        let r = b.rescaled(RowStat::RmsRstd, (s, None), s, "x", None);
        let s2 = b.reduce(ReduceOp::Max, x);
        let t = b.add(r, s2);
        b.output("out", BufferKind::RowScalar, t);
        assert!(matches!(
            b.finish().verify(),
            Err(VerifyError::KindMismatch { .. })
        ));
    }

    #[test]
    fn a_sum_exp_must_name_its_own_tiles_maximum() {
        let mut b = Builder::new("bad");
        let x = b.input("x", BufferKind::Row);
        let y = b.input("y", BufferKind::Row);
        let my = b.reduce(ReduceOp::Max, y);
        let mut p = {
            b.output("out", BufferKind::RowScalar, my);
            b.finish()
        };
        // sum(exp(x - max(y))) is not an online normalizer.
        let at = p.body.len() - 1;
        p.body.insert(at, Instr::ReduceSumExp { arg: x, max: my });
        assert!(matches!(p.verify(), Err(VerifyError::KindMismatch { .. })));
    }

    #[test]
    fn sum_and_add_keep_nothing_resident() {
        for op in [Operator::Sum, Operator::Add] {
            let a = op.program(OperatorOptions::default()).verify().unwrap();
            assert!(a.resident.is_empty(), "{op}");
        }
        let add = Operator::Add.program(OperatorOptions::default());
        assert!(!add.verify().unwrap().has_reduction());
    }

    #[test]
    fn residual_layernorm_can_keep_h_resident_instead_of_x_and_the_residual() {
        let opts = OperatorOptions::default();
        let programs = [
            Operator::ResidualLayernorm.program(opts),
            Operator::ResidualLayernorm
                .program_one_pass_moments(opts)
                .unwrap(),
        ];
        for p in programs {
            let a = p.verify().unwrap();
            let load = |name: &str| {
                p.body
                    .iter()
                    .position(|i| matches!(i, Instr::Load { buffer } if buffer == name))
                    .unwrap()
            };
            let (x, r) = (load("x"), load("residual"));
            assert_eq!(a.resident.len(), 2, "x and the residual: {}", p.to_text());
            let kept = a
                .keeping_rounded_tiles(&p)
                .expect("h is read in two phases");
            let [h] = kept.resident[..] else {
                panic!("one resident tile, h: {:?}", kept.resident);
            };
            assert!(matches!(p.body[h.index()], Instr::RoundToStorage(_)));
            assert!(kept.demanded[h.index()].len() > 1);
            // x and the residual are read in h's first phase only.
            let first = *kept.demanded[h.index()].first().unwrap();
            assert_eq!(kept.demanded[x], [first].into());
            assert_eq!(kept.demanded[r], [first].into());
            assert_eq!(
                (kept.phase.clone(), kept.num_phases),
                (a.phase.clone(), a.num_phases)
            );
        }
        for op in [Operator::Layernorm, Operator::Softmax, Operator::Rmsnorm] {
            let p = op.program(opts);
            assert!(
                p.verify().unwrap().keeping_rounded_tiles(&p).is_none(),
                "{op}"
            );
        }
    }

    /// A computed tile read in two phases replaces its loads where that
    /// holds fewer tiles: rmsnorm's gradient keeps x and `g = w * dy`
    /// instead of x, dy and the weight; an operator whose resident tiles
    /// are all loads read in two phases keeps nothing more.
    #[test]
    fn computed_tiles_kept_where_they_replace_more_loads() {
        let opts = OperatorOptions::default();
        let p = Operator::RmsnormBackward.program(opts);
        let a = p.verify().unwrap();
        assert_eq!(a.resident.len(), 3, "x, dy, w: {}", p.to_text());
        let kept = a.keeping_computed_tiles(&p).expect("g replaces dy and w");
        assert_eq!(kept.resident.len(), 2, "{:?}", kept.resident);
        let computed: Vec<_> = kept
            .resident
            .iter()
            .filter(|v| !matches!(p.body[v.index()], Instr::Load { .. }))
            .collect();
        let [g] = computed[..] else {
            panic!("one computed tile kept: {:?}", kept.resident);
        };
        assert!(matches!(
            p.body[g.index()],
            Instr::Binary {
                op: BinaryOp::Mul,
                ..
            }
        ));
        for op in [
            Operator::Softmax,
            Operator::Rmsnorm,
            Operator::SoftmaxBackward,
        ] {
            let p = op.program(opts);
            assert!(
                p.verify().unwrap().keeping_computed_tiles(&p).is_none(),
                "{op}"
            );
        }
    }

    #[test]
    fn layernorm_weight_is_read_in_one_phase_only() {
        let p = Operator::Layernorm.program(OperatorOptions::default());
        let a = p.verify().unwrap();
        let w = p
            .body
            .iter()
            .position(|i| matches!(i, Instr::Load { buffer } if buffer == "weight"))
            .unwrap();
        assert_eq!(a.demanded[w].len(), 1);
    }

    #[test]
    fn verifier_refuses_impure_aliased_and_escaping_programs() {
        // Reading an output.
        let mut b = Builder::new("bad");
        let x = b.input("x", BufferKind::Row);
        b.output("y", BufferKind::Row, x);
        let mut p = b.finish();
        p.body.insert(1, Instr::Load { buffer: "y".into() });
        assert!(matches!(p.verify(), Err(VerifyError::ReadsOutput { .. })));

        // Writing an input.
        let mut b = Builder::new("bad");
        let x = b.input("x", BufferKind::Row);
        b.store("x", x);
        assert!(matches!(
            b.finish().verify(),
            Err(VerifyError::WritesInput { .. })
        ));

        // Same name as input and output.
        let mut b = Builder::new("bad");
        let x = b.input("x", BufferKind::Row);
        b.output("x", BufferKind::Row, x);
        assert!(matches!(b.finish().verify(), Err(VerifyError::Alias(_))));

        // A tile stored into a per-row scalar.
        let mut b = Builder::new("bad");
        let x = b.input("x", BufferKind::Row);
        b.output("s", BufferKind::RowScalar, x);
        assert!(matches!(
            b.finish().verify(),
            Err(VerifyError::TileEscape { .. })
        ));

        // Tile plus scalar without a broadcast.
        let mut b = Builder::new("bad");
        let x = b.input("x", BufferKind::Row);
        let c = b.constant(1.0);
        let y = b.add(x, c);
        b.output("y", BufferKind::Row, y);
        assert!(matches!(
            b.finish().verify(),
            Err(VerifyError::KindMismatch { .. })
        ));

        // An output never stored.
        let mut b = Builder::new("bad");
        let x = b.input("x", BufferKind::Row);
        b.output("y", BufferKind::Row, x);
        b.declare_output("z", BufferKind::Row);
        assert!(matches!(
            b.finish().verify(),
            Err(VerifyError::StoreCount(..))
        ));
    }

    #[test]
    fn backward_programs_verify_and_keep_their_forwards_phase_count() {
        for op in Operator::BACKWARD {
            for weight in [false, true] {
                let opts = OperatorOptions { weight, bias: true };
                let p = op.program(opts);
                let a = p
                    .verify()
                    .unwrap_or_else(|e| panic!("{op}: {e}\n{}", p.to_text()));
                let phases = match op {
                    Operator::LayernormBackward | Operator::ResidualLayernormBackward => 3,
                    Operator::CrossEntropyBackwardRecompute | Operator::CrossEntropyWithGrad => 3,
                    Operator::CrossEntropyBackward => 1,
                    _ => 2,
                };
                assert_eq!(a.num_phases, phases, "{op}\n{}", p.to_text());
                let loss = usize::from(op == Operator::CrossEntropyWithGrad);
                assert_eq!(p.outputs.len(), 1 + loss, "{op}");
                assert_eq!(p.outputs[loss].name, "dx");
                assert_eq!(p.outputs[loss].kind, BufferKind::Row);
                assert_eq!(
                    p.input("weight").is_some(),
                    weight
                        && !matches!(
                            op.forward(),
                            Some(Operator::Softmax | Operator::CrossEntropy)
                        ),
                    "{op}"
                );
                assert!(op.forward().is_some());
            }
        }
        // The per-row incoming gradient is a scalar input.
        let ce = Operator::CrossEntropyBackwardRecompute.program(OperatorOptions::default());
        assert_eq!(
            ce.input("dloss").map(|d| d.kind),
            Some(BufferKind::RowScalar)
        );
        // Its softmax normalizer has the online form, as the forward's.
        assert!(ce.with_online_normalizer().is_some());
        assert!(Operator::Softmax.forward().is_none());
    }

    /// Each forward's training gradient is a backward operator whose
    /// forward it is; sum has none.
    #[test]
    fn input_gradients_lead_back_to_their_forwards() {
        for op in Operator::SIX {
            match op.input_gradient() {
                Some(grad) => {
                    assert!(Operator::BACKWARD.contains(&grad), "{op}");
                    assert_eq!(grad.forward(), Some(op));
                }
                None => assert_eq!(op, Operator::Sum),
            }
        }
        assert_eq!(
            Operator::CrossEntropy.input_gradient(),
            Some(Operator::CrossEntropyBackward)
        );
        assert!(Operator::RmsnormBackward.input_gradient().is_none());
    }

    /// cross_entropy_with_grad is the forward, instruction for instruction,
    /// then the backward's dx over the same normalizer: the backward's
    /// inputs, the forward's loss and the backward's dx as outputs.
    #[test]
    fn cross_entropy_with_grad_is_the_forward_then_the_backwards_dx() {
        let opts = OperatorOptions::default();
        let fwd = Operator::CrossEntropy.program(opts);
        let bwd = Operator::CrossEntropyBackwardRecompute.program(opts);
        let both = Operator::CrossEntropyWithGrad.program(opts);
        assert_eq!(both.body[..fwd.body.len()], fwd.body[..]);
        assert_eq!(both.inputs, bwd.inputs);
        let outputs: Vec<_> = fwd.outputs.iter().chain(&bwd.outputs).cloned().collect();
        assert_eq!(both.outputs, outputs);
        // The backward's instructions after the shared normalizer, in order,
        // their own values moved by the loss's instructions between.
        let shared = bwd
            .body
            .iter()
            .position(|i| matches!(i, Instr::Load { buffer } if buffer == "dloss"))
            .unwrap();
        let at = both.body.len() - (bwd.body.len() - shared);
        let unnumbered = |i: &Instr| -> String {
            let text = format!("{i:?}");
            let mut out = String::new();
            for (k, piece) in text.split("Value(").enumerate() {
                let rest = if k == 0 {
                    piece
                } else {
                    piece.trim_start_matches(|c: char| c.is_ascii_digit())
                };
                out.push_str(rest);
            }
            out
        };
        for (b, w) in both.body[at..].iter().zip(&bwd.body[shared..]) {
            assert_eq!(unnumbered(b), unnumbered(w));
            let moved: Vec<u32> = w
                .operands()
                .iter()
                .map(|v| {
                    if v.index() >= shared {
                        v.0 + (at - shared) as u32
                    } else {
                        v.0
                    }
                })
                .collect();
            let got: Vec<u32> = b.operands().iter().map(|v| v.0).collect();
            assert_eq!(got, moved, "{b:?} against {w:?}");
        }
        // One accumulating pass, then dx: x is read twice, never three times.
        let a = both.with_online_normalizer().unwrap().verify().unwrap();
        assert_eq!(a.num_phases, 2);
        assert_eq!(a.reductions.len(), 3, "max, sum of exp and x[target]");
    }

    /// cross_entropy_with_lse is the forward, instruction for instruction,
    /// plus one f32 per-row store of the log-sum-exp the loss computes (made
    /// NaN where the row's max is not finite: `lse + (m - m)`); the forward
    /// itself writes nothing more than the loss.
    #[test]
    fn cross_entropy_with_lse_is_the_forward_and_one_store() {
        let opts = OperatorOptions::default();
        let fwd = Operator::CrossEntropy.program(opts);
        let with = Operator::CrossEntropyWithLse.program(opts);
        assert_eq!(with.body[..fwd.body.len()], fwd.body[..]);
        assert_eq!(with.body.len(), fwd.body.len() + 3);
        assert_eq!(with.inputs, fwd.inputs);
        assert_eq!(with.outputs[..1], fwd.outputs[..]);
        assert_eq!(with.outputs[1].name, "lse");
        assert_eq!(with.outputs[1].kind, BufferKind::RowScalarF32);
        let Instr::Store { buffer, value } = &with.body[fwd.body.len() + 2] else {
            panic!("a store: {}", with.to_text());
        };
        assert_eq!(buffer, "lse");
        // (log(sum(exp(x - m))) + m) + (m - m): the value the loss subtracts
        // x[t] from, NaN where m is not finite.
        let Instr::Binary {
            op: BinaryOp::Add,
            lhs,
            rhs,
        } = &with.body[value.index()]
        else {
            panic!("an add: {}", with.to_text());
        };
        let log_plus_max = |v: crate::program::Value| {
            matches!(&with.body[v.index()], Instr::Binary { op: BinaryOp::Add, lhs, .. }
                if matches!(with.body[lhs.index()], Instr::Unary { op: UnaryOp::Log, .. }))
        };
        assert!(log_plus_max(*lhs), "{}", with.to_text());
        assert!(
            matches!(&with.body[rhs.index()], Instr::Binary { op: BinaryOp::Sub, lhs: a, rhs: b } if a == b),
            "{}",
            with.to_text()
        );
        assert_eq!(
            fwd.outputs.len(),
            1,
            "the default forward writes the loss only"
        );
        let a = with.with_online_normalizer().unwrap().verify().unwrap();
        assert!(a.resident.is_empty(), "x is still read once");
    }

    /// The backward from the saved lse reduces nothing: one element-wise
    /// phase over x, with target, lse and dloss per-row inputs, in that
    /// order after x.
    #[test]
    fn the_saved_lse_backward_is_element_only() {
        let p = Operator::CrossEntropyBackward.program(OperatorOptions::default());
        let a = p.verify().unwrap();
        assert!(!a.has_reduction());
        assert!(a.resident.is_empty());
        let inputs: Vec<_> = p.inputs.iter().map(|d| (d.name.as_str(), d.kind)).collect();
        assert_eq!(
            inputs,
            [
                ("x", BufferKind::Row),
                ("target", BufferKind::RowIndex),
                ("lse", BufferKind::RowScalarF32),
                ("dloss", BufferKind::RowScalar),
            ]
        );
        assert!(p.with_online_normalizer().is_none());
        // A saved statistic is an input or a per-row output, never a tile.
        let mut b = Builder::new("bad");
        let x = b.input("x", BufferKind::Row);
        b.output("s", BufferKind::RowScalarF32, x);
        assert!(matches!(
            b.finish().verify(),
            Err(VerifyError::TileEscape { .. })
        ));
    }

    /// A per-row scalar input loads as a scalar, available in phase 0: a
    /// tile operand needs its broadcast.
    #[test]
    fn a_row_scalar_input_is_a_scalar_of_phase_zero() {
        use crate::verify::Kind;
        let mut b = Builder::new("scale");
        let x = b.input("x", BufferKind::Row);
        let g = b.input("g", BufferKind::RowScalar);
        let gb = b.broadcast(g);
        let y = b.mul(x, gb);
        b.output("y", BufferKind::Row, y);
        let a = b.finish().verify().unwrap();
        assert_eq!((a.kinds[g.index()], a.phase[g.index()]), (Kind::Scalar, 0));
        assert_eq!(a.num_phases, 1);
        let mut b = Builder::new("bad");
        let x = b.input("x", BufferKind::Row);
        let g = b.input("g", BufferKind::RowScalar);
        let y = b.mul(x, g);
        b.output("y", BufferKind::Row, y);
        assert!(matches!(
            b.finish().verify(),
            Err(VerifyError::KindMismatch { .. })
        ));
    }

    #[test]
    fn parse_names_round_trip() {
        for op in Operator::training() {
            assert_eq!(op.name().parse::<Operator>().unwrap(), op);
        }
        for op in Operator::SIX {
            assert_eq!(op.name().parse::<Operator>().unwrap(), op);
        }
        assert!("gelu".parse::<Operator>().is_err());
    }
}
