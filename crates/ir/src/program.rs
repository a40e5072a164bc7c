use serde::{Deserialize, Serialize};

/// An SSA value: the index of the instruction that defines it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Value(pub u32);

impl Value {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a named buffer holds for one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BufferKind {
    /// N elements per row, in the problem's storage dtype.
    Row,
    /// N elements shared by every row (weight, bias), storage dtype.
    Column,
    /// One i64 per row (a class index).
    RowIndex,
    /// One element per row, storage dtype: a per-row output, or an input
    /// loaded as a per-row scalar (an incoming loss gradient).
    RowScalar,
    /// One f32 per row whatever the storage dtype: a row statistic a
    /// forward saves for its backward (cross entropy's log-sum-exp), where
    /// a 16-bit rounding would cost the backward ~2^-9 * |lse| of relative
    /// error in every element.
    RowScalarF32,
}

impl BufferKind {
    /// One value per row (a RowScalar or a RowScalarF32).
    pub fn is_row_scalar(self) -> bool {
        matches!(self, BufferKind::RowScalar | BufferKind::RowScalarF32)
    }

    /// The dtype a float buffer of this kind is stored in, for a problem
    /// stored in `dtype` (a RowIndex holds i64: not asked here).
    pub fn float_dtype(self, dtype: crate::DType) -> crate::DType {
        if self == BufferKind::RowScalarF32 {
            crate::DType::F32
        } else {
            dtype
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferDecl {
    pub name: String,
    pub kind: BufferKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnaryOp {
    Neg,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Recip,
    Square,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    /// FP32 addition: its order matters, so it needs the program's permission
    /// to be reassociated.
    Sum,
    /// `fmaxf` semantics (a NaN operand is ignored); exact in any order.
    Max,
}

impl ReduceOp {
    #[inline]
    pub fn identity(self) -> f32 {
        match self {
            ReduceOp::Sum => 0.0,
            ReduceOp::Max => f32::NEG_INFINITY,
        }
    }

    #[inline]
    pub fn combine(self, a: f32, b: f32) -> f32 {
        match self {
            ReduceOp::Sum => a + b,
            ReduceOp::Max => a.max(b),
        }
    }
}

/// The norm whose row an [`Instr::Rescaled`] recomputes on its cold path,
/// over the row `h` (the row input, or the storage-rounded sum of the row
/// input and the residual), every sum a compensated one in element order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowStat {
    /// rmsnorm's `1 / sqrt(mean(h^2) + eps)`, from h scaled by
    /// [`RESCUE_SCALE`]. Cold where the sum of squares is not finite.
    RmsRstd,
    /// layernorm's `1 / sqrt(var(h) + eps)`: two passes over h scaled by a
    /// power of two to order 1, centred on h's first element. Cold where
    /// the variance is not finite or `var * 2^LN_CANCEL_BITS < mean^2`
    /// (the mean's rounding would show in the centred row).
    LnRstd,
}

/// layernorm's cold-path threshold: a row whose mean exceeds 2^6 standard
/// deviations takes it (the fast path's error there is at most about
/// 2^(6-24) of the output, inside f32's 1e-5).
pub const LN_CANCEL_BITS: i32 = 12;

/// The slow path's scale, 2^-76: squares of f32 values scaled by it stay
/// below 2^104, so a row of up to 2^23 of them sums without overflow, and a
/// row whose sum of squares overflowed keeps its largest square above
/// 2^-55 (no loss to underflow that f32 could see).
pub const RESCUE_SCALE: f32 = 1.0 / (1u128 << 76) as f32;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Instr {
    /// Read the named input at the evaluated element (Row, Column), the
    /// row's index (RowIndex) or the row's scalar (RowScalar), converted to
    /// f32 / i64.
    Load {
        buffer: String,
    },
    /// A scalar constant.
    Const(f32),
    /// Element 0 of the row of a Row input, as a per-row scalar (the
    /// shift of layernorm's one-pass moments).
    RowFirst {
        buffer: String,
    },
    /// The row length N as a scalar.
    RowLen,
    Unary {
        op: UnaryOp,
        arg: Value,
    },
    /// Both operands of one kind: tile with tile, scalar with scalar.
    Binary {
        op: BinaryOp,
        lhs: Value,
        rhs: Value,
    },
    /// A per-row scalar repeated over the tile.
    Broadcast(Value),
    /// Tile to per-row scalar; the only way one worker sees another's data.
    Reduce {
        op: ReduceOp,
        arg: Value,
    },
    /// `sum(exp(arg - max))` with `max` the row's `Reduce(Max, arg)`,
    /// accumulated in the same pass as that maximum (an online normalizer:
    /// each worker rescales its running sum when its running maximum grows,
    /// and the tree combines (max, sum) pairs). Ready in the same phase as
    /// `max`, so softmax and cross-entropy need one tree fewer.
    ReduceSumExp {
        arg: Value,
        max: Value,
    },
    /// Round through the problem's storage dtype (identity for f32).
    RoundToStorage(Value),
    /// Element i of `tile` where i == index, 0 elsewhere.
    MaskIndex {
        tile: Value,
        index: Value,
    },
    /// Scalar select on a row index: `if_eq` where index == sentinel.
    SelectIndexEq {
        index: Value,
        sentinel: i64,
        if_eq: Value,
        otherwise: Value,
    },
    /// A norm's per-row statistic with a rare cold path: `fast` where the
    /// statistic `check` (and `mean`, see [`RowStat`]) says the fast path is
    /// sound. Elsewhere (overflow, infinities, NaN, cancellation) the row's
    /// Row outputs are computed again from the inputs, in scaled form, by
    /// the cold path of `stat`, and nothing after this instruction runs for
    /// the row. Costs the fast path one or two comparisons per row; the cold
    /// path is a separate, non-inlined function in the kernel.
    Rescaled {
        stat: RowStat,
        check: Value,
        /// The row's mean, for [`RowStat::LnRstd`].
        mean: Option<Value>,
        fast: Value,
        /// The Row input h is, or the first of the two it sums.
        x: String,
        /// The second Row input of `h = round(x + residual)`.
        residual: Option<String>,
    },
    /// Write a tile to a Row output or a scalar to a RowScalar output.
    Store {
        buffer: String,
        value: Value,
    },
}

impl Instr {
    /// The SSA operands, in order.
    pub fn operands(&self) -> Vec<Value> {
        match self {
            Instr::Load { .. } | Instr::Const(_) | Instr::RowLen | Instr::RowFirst { .. } => {
                vec![]
            }
            Instr::Unary { arg, .. }
            | Instr::Broadcast(arg)
            | Instr::Reduce { arg, .. }
            | Instr::RoundToStorage(arg) => vec![*arg],
            Instr::Binary { lhs, rhs, .. } => vec![*lhs, *rhs],
            Instr::ReduceSumExp { arg, max } => vec![*arg, *max],
            Instr::MaskIndex { tile, index } => vec![*tile, *index],
            Instr::Rescaled {
                check, mean, fast, ..
            } => [*check, *fast].into_iter().chain(*mean).collect(),
            Instr::SelectIndexEq {
                index,
                if_eq,
                otherwise,
                ..
            } => vec![*index, *if_eq, *otherwise],
            Instr::Store { value, .. } => vec![*value],
        }
    }
}

/// A row program. Construct it with [`Builder`]; check it with
/// [`Program::verify`] before planning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Program {
    pub name: String,
    pub inputs: Vec<BufferDecl>,
    pub outputs: Vec<BufferDecl>,
    pub body: Vec<Instr>,
    /// May the FP32 sums be evaluated in an order other than sequential?
    pub reassociation: bool,
}

impl Program {
    /// The index of a norm's epsilon: the one constant added to a row
    /// statistic under a reciprocal square root (`rsqrt(stat + eps)`).
    /// None where the program has no such constant, or several.
    fn norm_eps_index(&self) -> Option<usize> {
        let constant = |v: Value| matches!(self.body.get(v.index()), Some(Instr::Const(_)));
        let mut found = self.body.iter().filter_map(|instr| {
            let Instr::Unary {
                op: UnaryOp::Rsqrt,
                arg,
            } = instr
            else {
                return None;
            };
            match self.body.get(arg.index())? {
                Instr::Binary {
                    op: BinaryOp::Add,
                    lhs,
                    rhs,
                } => [*rhs, *lhs].into_iter().find(|&v| constant(v)),
                _ => None,
            }
        });
        let first = found.next()?;
        found.all(|v| v == first).then_some(first.index())
    }

    /// A norm's epsilon (see [`Program::set_norm_eps`]).
    pub fn norm_eps(&self) -> Option<f32> {
        match self.body[self.norm_eps_index()?] {
            Instr::Const(c) => Some(c),
            _ => None,
        }
    }

    /// Set a norm's epsilon, the one constant added to a row statistic
    /// under a reciprocal square root, which the cold path reads too.
    /// False (and nothing changed) where the program has no such constant.
    pub fn set_norm_eps(&mut self, eps: f32) -> bool {
        match self.norm_eps_index() {
            Some(i) => {
                self.body[i] = Instr::Const(eps);
                true
            }
            None => false,
        }
    }

    pub fn input(&self, name: &str) -> Option<&BufferDecl> {
        self.inputs.iter().find(|b| b.name == name)
    }

    pub fn output(&self, name: &str) -> Option<&BufferDecl> {
        self.outputs.iter().find(|b| b.name == name)
    }

    /// The per-column inputs (weight, bias), which every row reads again.
    pub fn column_inputs(&self) -> impl Iterator<Item = &BufferDecl> {
        self.inputs.iter().filter(|b| b.kind == BufferKind::Column)
    }

    /// The per-row inputs (x, a residual), which each row reads once.
    pub fn row_inputs(&self) -> impl Iterator<Item = &BufferDecl> {
        self.inputs.iter().filter(|b| b.kind == BufferKind::Row)
    }

    /// The same program without permission to reorder its sums.
    pub fn exact(mut self) -> Program {
        self.reassociation = false;
        self
    }

    /// The program with every `Reduce(Sum, Exp(Sub(x, Broadcast(m))))`,
    /// where `m = Reduce(Max, x)`, accumulated with that maximum in one pass
    /// ([`Instr::ReduceSumExp`]); None where no sum has that shape. The
    /// value is the same up to rounding; the tree and the passes differ.
    pub fn with_online_normalizer(&self) -> Option<Program> {
        let body = &self.body;
        let mut out = self.clone();
        let mut changed = false;
        for (at, instr) in body.iter().enumerate() {
            let Instr::Reduce {
                op: ReduceOp::Sum,
                arg: e,
            } = instr
            else {
                continue;
            };
            let Instr::Unary {
                op: UnaryOp::Exp,
                arg: d,
            } = &body[e.index()]
            else {
                continue;
            };
            let Instr::Binary {
                op: BinaryOp::Sub,
                lhs: x,
                rhs: mb,
            } = &body[d.index()]
            else {
                continue;
            };
            let Instr::Broadcast(m) = &body[mb.index()] else {
                continue;
            };
            if body[m.index()]
                == (Instr::Reduce {
                    op: ReduceOp::Max,
                    arg: *x,
                })
            {
                out.body[at] = Instr::ReduceSumExp { arg: *x, max: *m };
                changed = true;
            }
        }
        changed.then_some(out)
    }
}

/// Builds a program instruction by instruction.
pub struct Builder {
    program: Program,
}

impl Builder {
    pub fn new(name: &str) -> Self {
        Builder {
            program: Program {
                name: name.to_string(),
                inputs: vec![],
                outputs: vec![],
                body: vec![],
                reassociation: true,
            },
        }
    }

    fn push(&mut self, instr: Instr) -> Value {
        self.program.body.push(instr);
        Value((self.program.body.len() - 1) as u32)
    }

    pub fn declare_input(&mut self, name: &str, kind: BufferKind) {
        self.program.inputs.push(BufferDecl {
            name: name.into(),
            kind,
        });
    }

    pub fn declare_output(&mut self, name: &str, kind: BufferKind) {
        self.program.outputs.push(BufferDecl {
            name: name.into(),
            kind,
        });
    }

    /// Declare and load an input in one step.
    pub fn input(&mut self, name: &str, kind: BufferKind) -> Value {
        self.declare_input(name, kind);
        self.load(name)
    }

    pub fn load(&mut self, name: &str) -> Value {
        self.push(Instr::Load {
            buffer: name.into(),
        })
    }

    pub fn constant(&mut self, c: f32) -> Value {
        self.push(Instr::Const(c))
    }

    /// Element 0 of the row of the Row input `buffer`, as a scalar.
    pub fn row_first(&mut self, buffer: &str) -> Value {
        self.push(Instr::RowFirst {
            buffer: buffer.to_string(),
        })
    }

    pub fn row_len(&mut self) -> Value {
        self.push(Instr::RowLen)
    }

    pub fn unary(&mut self, op: UnaryOp, arg: Value) -> Value {
        self.push(Instr::Unary { op, arg })
    }

    pub fn binary(&mut self, op: BinaryOp, lhs: Value, rhs: Value) -> Value {
        self.push(Instr::Binary { op, lhs, rhs })
    }

    pub fn add(&mut self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Add, a, b)
    }
    pub fn sub(&mut self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Sub, a, b)
    }
    pub fn mul(&mut self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Mul, a, b)
    }
    pub fn div(&mut self, a: Value, b: Value) -> Value {
        self.binary(BinaryOp::Div, a, b)
    }

    pub fn broadcast(&mut self, scalar: Value) -> Value {
        self.push(Instr::Broadcast(scalar))
    }

    pub fn reduce(&mut self, op: ReduceOp, tile: Value) -> Value {
        self.push(Instr::Reduce { op, arg: tile })
    }

    pub fn round_to_storage(&mut self, v: Value) -> Value {
        self.push(Instr::RoundToStorage(v))
    }

    pub fn mask_index(&mut self, tile: Value, index: Value) -> Value {
        self.push(Instr::MaskIndex { tile, index })
    }

    pub fn select_index_eq(
        &mut self,
        index: Value,
        sentinel: i64,
        if_eq: Value,
        otherwise: Value,
    ) -> Value {
        self.push(Instr::SelectIndexEq {
            index,
            sentinel,
            if_eq,
            otherwise,
        })
    }

    /// `fast`, or the row's outputs from the cold path of `stat` where
    /// `check` (and `mean`) call for it ([`Instr::Rescaled`]).
    pub fn rescaled(
        &mut self,
        stat: RowStat,
        (check, mean): (Value, Option<Value>),
        fast: Value,
        x: &str,
        residual: Option<&str>,
    ) -> Value {
        self.push(Instr::Rescaled {
            stat,
            check,
            mean,
            fast,
            x: x.to_string(),
            residual: residual.map(str::to_string),
        })
    }

    /// Declare an output (if new) and store `value` into it.
    pub fn output(&mut self, name: &str, kind: BufferKind, value: Value) {
        if self.program.output(name).is_none() {
            self.declare_output(name, kind);
        }
        self.store(name, value);
    }

    pub fn store(&mut self, name: &str, value: Value) {
        self.push(Instr::Store {
            buffer: name.into(),
            value,
        });
    }

    pub fn finish(self) -> Program {
        self.program
    }
}
