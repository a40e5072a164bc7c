use crate::program::{Instr, Program};

impl Program {
    /// A readable listing, one instruction per line, annotated with kinds
    /// and phases when the program verifies.
    pub fn to_text(&self) -> String {
        let analysis = self.verify().ok();
        let mut out = format!(
            "program {} (reassociation: {})\n",
            self.name,
            if self.reassociation {
                "permitted"
            } else {
                "exact order only"
            }
        );
        for b in &self.inputs {
            out += &format!("  in  {}: {:?}\n", b.name, b.kind);
        }
        for b in &self.outputs {
            out += &format!("  out {}: {:?}\n", b.name, b.kind);
        }
        for (i, instr) in self.body.iter().enumerate() {
            let rhs = match instr {
                Instr::Load { buffer } => format!("load {buffer}"),
                Instr::Const(c) => format!("const {c:e}"),
                Instr::RowLen => "row_len".into(),
                Instr::RowFirst { buffer } => format!("row_first {buffer}"),
                Instr::Unary { op, arg } => format!("{op:?} %{}", arg.0).to_lowercase(),
                Instr::Binary { op, lhs, rhs } => {
                    format!("{op:?} %{}, %{}", lhs.0, rhs.0).to_lowercase()
                }
                Instr::Broadcast(v) => format!("broadcast %{}", v.0),
                Instr::Reduce { op, arg } => format!("reduce.{op:?} %{}", arg.0).to_lowercase(),
                Instr::ReduceSumExp { arg, max } => {
                    format!("reduce.sum_exp %{}, max %{}", arg.0, max.0)
                }
                Instr::RoundToStorage(v) => format!("round_to_storage %{}", v.0),
                Instr::MaskIndex { tile, index } => {
                    format!("mask_index %{}, %{}", tile.0, index.0)
                }
                Instr::SelectIndexEq {
                    index,
                    sentinel,
                    if_eq,
                    otherwise,
                } => format!(
                    "select %{} == {sentinel} ? %{} : %{}",
                    index.0, if_eq.0, otherwise.0
                ),
                Instr::Rescaled {
                    stat,
                    check,
                    mean,
                    fast,
                    x,
                    residual,
                } => {
                    let h = match residual {
                        Some(r) => format!("{x}+{r}"),
                        None => x.clone(),
                    };
                    let m = mean.map_or(String::new(), |m| format!(", %{}", m.0));
                    format!("rescaled.{stat:?} %{}{m} ? %{} : {h}", check.0, fast.0).to_lowercase()
                }
                Instr::Store { buffer, value } => format!("store {buffer}, %{}", value.0),
            };
            let note = match &analysis {
                Some(a) => {
                    let mut s = format!("{:?}, phase {}", a.kinds[i], a.phase[i]).to_lowercase();
                    if a.resident.iter().any(|v| v.index() == i) {
                        s += ", resident";
                    }
                    s
                }
                None => "unverified".into(),
            };
            out += &format!("  %{i:<3} = {rhs:<36} ; {note}\n");
        }
        out
    }
}
