use crate::program::{BufferKind, Instr, Program, ReduceOp, RowStat, Value};
use std::collections::{BTreeSet, HashSet};

/// The kind of an SSA value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// One f32 per logical element, owned by the element's worker.
    Tile,
    /// One f32 per row, the same in every worker.
    Scalar,
    /// One i64 per row.
    Index,
    /// A store: no value.
    Effect,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("%{at}: operand %{operand} is not defined before its use")]
    UndefinedValue { at: usize, operand: u32 },
    #[error("%{at}: {what}")]
    KindMismatch { at: usize, what: String },
    #[error("%{at}: buffer '{buffer}' is not declared")]
    UnknownBuffer { at: usize, buffer: String },
    #[error("impure: %{at} reads output buffer '{buffer}'")]
    ReadsOutput { at: usize, buffer: String },
    #[error("impure: %{at} writes input buffer '{buffer}'")]
    WritesInput { at: usize, buffer: String },
    #[error(
        "aliasing: buffer '{0}' is declared more than once (inputs and outputs must be distinct)"
    )]
    Alias(String),
    #[error("buffer '{name}': a {role} cannot be of kind {kind:?}")]
    BadBufferKind {
        name: String,
        role: &'static str,
        kind: BufferKind,
    },
    #[error("escape: %{at} stores a tile into per-row scalar output '{buffer}'")]
    TileEscape { at: usize, buffer: String },
    #[error("output '{0}' is stored {1} times (exactly once required)")]
    StoreCount(String, usize),
}

/// What the planner and the backends need to know about a verified program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Analysis {
    pub kinds: Vec<Kind>,
    /// Phase at which each value becomes available. A reduction over a tile
    /// of phase p completes at the end of phase p, so its result is phase p+1.
    pub phase: Vec<usize>,
    /// For each tile value, the phases in which a consumer needs it.
    pub demanded: Vec<BTreeSet<usize>>,
    pub num_phases: usize,
    /// Reductions in program order.
    pub reductions: Vec<Value>,
    /// Loads needed in more than one phase: kept in private slots (or
    /// re-read from memory when they do not fit).
    pub resident: Vec<Value>,
}

impl Analysis {
    pub fn has_reduction(&self) -> bool {
        !self.reductions.is_empty()
    }

    /// Reductions whose result is ready at the start of `phase`, accumulated
    /// in `phase - 1`.
    pub fn reductions_of_phase(&self, phase: usize) -> impl Iterator<Item = Value> + '_ {
        self.reductions
            .iter()
            .copied()
            .filter(move |r| self.phase[r.index()] == phase + 1)
    }

    /// The resident load of the program's only row input (the row a
    /// register plan may hold partly in shared memory); None where the
    /// program reads several rows or keeps none resident.
    pub fn resident_row_load(&self, program: &Program) -> Option<Value> {
        let mut rows = program.row_inputs();
        let row = rows.next()?;
        if rows.next().is_some() {
            return None;
        }
        self.resident.iter().copied().find(
            |v| matches!(&program.body[v.index()], Instr::Load { buffer } if *buffer == row.name),
        )
    }

    /// This analysis with every rounded tile (`RoundToStorage` of a tile,
    /// exactly a storage value: residual_layernorm's `h`) that a later
    /// phase reads again kept resident itself, so its operands (x and the
    /// residual) are read in its first phase only: one tile of private
    /// slots instead of two. None where no rounded tile is read in two
    /// phases. For register plans: a streamed plan re-reads loads from
    /// memory and cannot re-read a computed tile.
    pub fn keeping_rounded_tiles(&self, program: &Program) -> Option<Analysis> {
        let kept: BTreeSet<usize> = (0..program.body.len())
            .filter(|&at| {
                matches!(program.body[at], Instr::RoundToStorage(_))
                    && self.kinds[at] == Kind::Tile
                    && self.demanded[at].len() > 1
            })
            .collect();
        (!kept.is_empty()).then(|| self.keeping(program, &kept))
    }

    /// This analysis with the tiles `kept` resident themselves: each
    /// computed once, in the first phase that needs it.
    fn keeping(&self, program: &Program, kept: &BTreeSet<usize>) -> Analysis {
        let demanded = demand(program, &self.kinds, &self.phase, kept);
        let mut resident = resident_loads(program, &demanded);
        resident.extend(kept.iter().map(|&at| Value(at as u32)));
        resident.sort_by_key(|v| v.index());
        Analysis {
            demanded,
            resident,
            ..self.clone()
        }
    }

    /// This analysis with computed tiles that later phases read again kept
    /// resident themselves wherever that holds fewer tiles: rmsnorm's
    /// gradient keeps `g = w * dy` (read by the first phase's sum and by
    /// the output) instead of dy and the weight, two tiles instead of
    /// three. Greedy in program order, each tile kept only if the count
    /// of resident tiles falls; rounded tiles are left to
    /// [`Analysis::keeping_rounded_tiles`]. The kept value is the one a
    /// recomputation gives, bit for bit. None where nothing is kept. For
    /// register plans, as a streamed plan cannot re-read a computed tile.
    pub fn keeping_computed_tiles(&self, program: &Program) -> Option<Analysis> {
        let is_load = |at: usize| matches!(program.body[at], Instr::Load { .. });
        let mut kept: BTreeSet<usize> = self
            .resident
            .iter()
            .map(|v| v.index())
            .filter(|&at| !is_load(at))
            .collect();
        let mut best = self.clone();
        for at in 0..program.body.len() {
            let candidate = self.kinds[at] == Kind::Tile
                && !is_load(at)
                && !matches!(program.body[at], Instr::RoundToStorage(_))
                && best.demanded[at].len() > 1
                && !kept.contains(&at);
            if !candidate {
                continue;
            }
            let mut trial = kept.clone();
            trial.insert(at);
            let keeping = self.keeping(program, &trial);
            if keeping.resident.len() < best.resident.len() {
                kept = trial;
                best = keeping;
            }
        }
        (best.resident.len() < self.resident.len()).then_some(best)
    }
}

/// Demand: a tile is needed wherever a consumer evaluates. Stores and
/// reductions consume at their operand's own phase; element-wise consumers
/// pass their demand on, except a `kept` tile, which is computed once (in
/// the first phase that needs it) and read from its slots after, so its
/// operands are needed in that phase only. Walks users before definitions.
fn demand(
    program: &Program,
    kinds: &[Kind],
    phase: &[usize],
    kept: &BTreeSet<usize>,
) -> Vec<BTreeSet<usize>> {
    let n = program.body.len();
    let mut demanded: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for at in (0..n).rev() {
        let instr = &program.body[at];
        let own: BTreeSet<usize> = match instr {
            Instr::Store { value, .. } => [phase[value.index()]].into(),
            Instr::Reduce { arg, .. } | Instr::ReduceSumExp { arg, .. } => {
                [phase[arg.index()]].into()
            }
            _ if kept.contains(&at) => demanded[at].first().copied().into_iter().collect(),
            _ => demanded[at].clone(),
        };
        for op in instr.operands() {
            if kinds[op.index()] == Kind::Tile {
                demanded[op.index()].extend(own.iter().copied());
            }
        }
    }
    demanded
}

/// Loads needed in more than one phase.
fn resident_loads(program: &Program, demanded: &[BTreeSet<usize>]) -> Vec<Value> {
    (0..program.body.len())
        .filter(|&i| matches!(program.body[i], Instr::Load { .. }) && demanded[i].len() > 1)
        .map(|i| Value(i as u32))
        .collect()
}

impl Program {
    /// Check types, purity, aliasing and non-escape; compute phases.
    pub fn verify(&self) -> Result<Analysis, VerifyError> {
        let mut names = HashSet::new();
        for b in self.inputs.iter().chain(&self.outputs) {
            if !names.insert(b.name.as_str()) {
                return Err(VerifyError::Alias(b.name.clone()));
            }
        }
        for b in &self.outputs {
            if !(b.kind == BufferKind::Row || b.kind.is_row_scalar()) {
                return Err(VerifyError::BadBufferKind {
                    name: b.name.clone(),
                    role: "output",
                    kind: b.kind,
                });
            }
        }

        let n = self.body.len();
        let mut kinds = Vec::with_capacity(n);
        let mut phase = Vec::with_capacity(n);
        let mut reductions = vec![];
        let mut store_counts = vec![0usize; self.outputs.len()];
        for (at, instr) in self.body.iter().enumerate() {
            for op in instr.operands() {
                if op.index() >= at {
                    return Err(VerifyError::UndefinedValue { at, operand: op.0 });
                }
                if kinds[op.index()] == Kind::Effect {
                    return Err(mismatch(at, "a store has no value to use"));
                }
            }
            let k = |v: &Value| kinds[v.index()];
            let ph = |v: &Value| phase[v.index()];
            let (kind, p) = match instr {
                Instr::Load { buffer } => {
                    let decl = match self.input(buffer) {
                        Some(d) => d,
                        None if self.output(buffer).is_some() => {
                            return Err(VerifyError::ReadsOutput {
                                at,
                                buffer: buffer.clone(),
                            })
                        }
                        None => {
                            return Err(VerifyError::UnknownBuffer {
                                at,
                                buffer: buffer.clone(),
                            })
                        }
                    };
                    let kind = match decl.kind {
                        BufferKind::Row | BufferKind::Column => Kind::Tile,
                        BufferKind::RowIndex => Kind::Index,
                        BufferKind::RowScalar | BufferKind::RowScalarF32 => Kind::Scalar,
                    };
                    (kind, 0)
                }
                Instr::Const(_) | Instr::RowLen => (Kind::Scalar, 0),
                Instr::RowFirst { buffer } => {
                    if self.input(buffer).map(|d| d.kind) != Some(BufferKind::Row) {
                        return Err(mismatch(at, "row_first takes a Row input buffer"));
                    }
                    (Kind::Scalar, 0)
                }
                Instr::Unary { arg, .. } => match k(arg) {
                    Kind::Tile | Kind::Scalar => (k(arg), ph(arg)),
                    _ => return Err(mismatch(at, "unary operand must be a tile or scalar")),
                },
                Instr::Binary { lhs, rhs, .. } => {
                    if k(lhs) != k(rhs) || !matches!(k(lhs), Kind::Tile | Kind::Scalar) {
                        return Err(mismatch(
                            at,
                            "binary operands must both be tiles or both scalars (broadcast explicitly)",
                        ));
                    }
                    (k(lhs), ph(lhs).max(ph(rhs)))
                }
                Instr::Broadcast(s) => {
                    if k(s) != Kind::Scalar {
                        return Err(mismatch(at, "broadcast takes a per-row scalar"));
                    }
                    (Kind::Tile, ph(s))
                }
                Instr::Reduce { arg, .. } => {
                    if k(arg) != Kind::Tile {
                        return Err(mismatch(at, "reduce takes a tile"));
                    }
                    reductions.push(Value(at as u32));
                    (Kind::Scalar, ph(arg) + 1)
                }
                Instr::ReduceSumExp { arg, max } => {
                    let paired = self.body[max.index()]
                        == Instr::Reduce {
                            op: ReduceOp::Max,
                            arg: *arg,
                        };
                    if k(arg) != Kind::Tile || !paired {
                        return Err(mismatch(
                            at,
                            "reduce_sum_exp takes a tile and that tile's Reduce(Max)",
                        ));
                    }
                    reductions.push(Value(at as u32));
                    // Accumulated with its maximum: ready when the maximum is.
                    (Kind::Scalar, ph(arg) + 1)
                }
                Instr::RoundToStorage(v) => match k(v) {
                    Kind::Tile | Kind::Scalar => (k(v), ph(v)),
                    _ => return Err(mismatch(at, "round takes a tile or scalar")),
                },
                Instr::MaskIndex { tile, index } => {
                    if k(tile) != Kind::Tile || k(index) != Kind::Index {
                        return Err(mismatch(at, "mask_index takes a tile and a row index"));
                    }
                    (Kind::Tile, ph(tile).max(ph(index)))
                }
                Instr::SelectIndexEq {
                    index,
                    if_eq,
                    otherwise,
                    ..
                } => {
                    if k(index) != Kind::Index
                        || k(if_eq) != Kind::Scalar
                        || k(otherwise) != Kind::Scalar
                    {
                        return Err(mismatch(
                            at,
                            "select_index_eq takes a row index and two scalars",
                        ));
                    }
                    (Kind::Scalar, ph(index).max(ph(if_eq)).max(ph(otherwise)))
                }
                Instr::Rescaled {
                    stat,
                    check,
                    mean,
                    fast,
                    x,
                    residual,
                } => {
                    let row_input =
                        |b: &String| self.input(b).map(|d| d.kind) == Some(BufferKind::Row);
                    if k(check) != Kind::Scalar
                        || k(fast) != Kind::Scalar
                        || mean.iter().any(|m| k(m) != Kind::Scalar)
                        || mean.is_some() != (*stat == RowStat::LnRstd)
                        || !row_input(x)
                        || !residual.iter().all(row_input)
                    {
                        return Err(mismatch(
                            at,
                            "rescaled takes two scalars (three for layernorm) and one or two Row input buffers",
                        ));
                    }
                    // The cold path skips the rest of the row: a reduction
                    // after it would leave the row's other workers waiting.
                    let later = &self.body[at + 1..];
                    if later.iter().any(|i| {
                        matches!(
                            i,
                            Instr::Reduce { .. }
                                | Instr::ReduceSumExp { .. }
                                | Instr::Rescaled { .. }
                        )
                    }) {
                        return Err(mismatch(
                            at,
                            "rescaled must follow the program's last reduction and be its only one",
                        ));
                    }
                    let m = mean.map_or(0, |m| ph(&m));
                    (Kind::Scalar, ph(check).max(ph(fast)).max(m))
                }
                Instr::Store { buffer, value } => {
                    let Some(slot) = self.outputs.iter().position(|b| &b.name == buffer) else {
                        if self.input(buffer).is_some() {
                            return Err(VerifyError::WritesInput {
                                at,
                                buffer: buffer.clone(),
                            });
                        }
                        return Err(VerifyError::UnknownBuffer {
                            at,
                            buffer: buffer.clone(),
                        });
                    };
                    store_counts[slot] += 1;
                    match (self.outputs[slot].kind, k(value)) {
                        (BufferKind::Row, Kind::Tile) => {}
                        (k, Kind::Scalar) if k.is_row_scalar() => {}
                        (k, Kind::Tile) if k.is_row_scalar() => {
                            return Err(VerifyError::TileEscape {
                                at,
                                buffer: buffer.clone(),
                            })
                        }
                        _ => {
                            return Err(mismatch(
                                at,
                                "a row output takes a tile, a per-row scalar output a scalar",
                            ))
                        }
                    }
                    (Kind::Effect, ph(value))
                }
            };
            kinds.push(kind);
            phase.push(p);
        }
        for (decl, count) in self.outputs.iter().zip(&store_counts) {
            if *count != 1 {
                return Err(VerifyError::StoreCount(decl.name.clone(), *count));
            }
        }

        let demanded = demand(self, &kinds, &phase, &BTreeSet::new());
        let resident = resident_loads(self, &demanded);
        let num_phases = phase.iter().copied().max().unwrap_or(0) + 1;
        Ok(Analysis {
            kinds,
            phase,
            demanded,
            num_phases,
            reductions,
            resident,
        })
    }

    /// Does any sum (whose order matters) appear?
    pub fn has_sum(&self) -> bool {
        self.body.iter().any(|i| {
            matches!(
                i,
                Instr::Reduce {
                    op: ReduceOp::Sum,
                    ..
                } | Instr::ReduceSumExp { .. }
            )
        })
    }
}

fn mismatch(at: usize, what: &str) -> VerifyError {
    VerifyError::KindMismatch {
        at,
        what: what.to_string(),
    }
}
