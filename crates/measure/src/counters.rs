//! Hardware-counter evidence from Nsight Compute (`scripts/profile-ncu.sh`):
//! per profiled launch, `NAME-raw.csv[.gz]` (`ncu --page raw --csv`: a
//! header row of metric names, a row of units, one row per kernel) beside
//! `NAME-details.txt`, the page ncu rendered from the same report. The
//! `counters` table is computed from the raw rows only; the audit checks
//! that each details page says what its raw row says, so a summary quoted
//! from either cannot drift from the counters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const RAW_SUFFIX: &str = "-raw.csv";
const DURATION: &str = "gpu__time_duration.sum";
const DRAM_PCT: &str = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed";
const STALL_PREFIX: &str = "smsp__average_warps_issue_stalled_";
const STALL_SUFFIX: &str = "_per_issue_active.ratio";

/// One profiled launch: its metrics by name, with their units.
#[derive(Debug, Clone)]
pub struct KernelCounters {
    /// The file's stem (`NAME` of `NAME-raw.csv`).
    pub name: String,
    /// The kernel's name as ncu recorded it.
    pub kernel: String,
    values: BTreeMap<String, String>,
    units: BTreeMap<String, String>,
}

impl KernelCounters {
    /// Parse a raw page holding exactly one kernel row.
    pub fn parse(name: &str, text: &str) -> Result<Self, String> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(false)
            .from_reader(text.as_bytes());
        let mut records = vec![];
        for record in reader.records() {
            records.push(record.map_err(|e| format!("malformed CSV: {e}"))?);
        }
        if records.len() < 2 {
            return Err("no header and unit rows (not an `ncu --page raw --csv` page)".into());
        }
        let kernels = records.len() - 2;
        if kernels != 1 {
            return Err(format!("{kernels} kernel rows, expected exactly 1"));
        }
        let (header, units, row) = (&records[0], &records[1], &records[2]);
        let mut values = BTreeMap::new();
        let mut unit_of = BTreeMap::new();
        for ((metric, unit), value) in header.iter().zip(units).zip(row) {
            values.insert(metric.to_string(), value.to_string());
            unit_of.insert(metric.to_string(), unit.to_string());
        }
        let kernel = values
            .get("Kernel Name")
            .filter(|k| !k.is_empty())
            .cloned()
            .ok_or("no `Kernel Name` column")?;
        let counters = KernelCounters {
            name: name.to_string(),
            kernel,
            values,
            units: unit_of,
        };
        if counters.value(DURATION).is_none() {
            return Err(format!("no numeric {DURATION}"));
        }
        Ok(counters)
    }

    /// A metric as a number (ncu groups thousands with commas); None when
    /// absent, empty or not a number.
    pub fn value(&self, metric: &str) -> Option<f64> {
        let raw = self.values.get(metric)?.replace(',', "");
        raw.parse::<f64>().ok().filter(|v| v.is_finite())
    }

    pub fn unit(&self, metric: &str) -> Option<&str> {
        self.units.get(metric).map(String::as_str)
    }

    /// A time or rate metric in the given base unit: the recorded unit's
    /// prefix applied (`ms` -> µs, `Gbyte/s` -> Tbyte/s).
    fn scaled(&self, metric: &str, base: &str, scale: &[(&str, f64)]) -> Option<f64> {
        let v = self.value(metric)?;
        let unit = self.unit(metric)?;
        if unit == base {
            return Some(v);
        }
        scale.iter().find(|(u, _)| *u == unit).map(|(_, f)| v * f)
    }

    /// The launch's duration in µs.
    pub fn duration_us(&self) -> Option<f64> {
        self.scaled(
            DURATION,
            "us",
            &[("ns", 1e-3), ("ms", 1e3), ("s", 1e6), ("usecond", 1.0)],
        )
    }

    /// DRAM bytes moved per second, TB/s.
    pub fn dram_tbps(&self) -> Option<f64> {
        self.scaled(
            "dram__bytes.sum.per_second",
            "Tbyte/s",
            &[("Gbyte/s", 1e-3), ("Mbyte/s", 1e-6), ("byte/s", 1e-12)],
        )
    }

    /// Groups resident per SM (the smallest of ncu's occupancy limits).
    pub fn groups_per_sm(&self) -> Option<f64> {
        [
            "launch__occupancy_limit_registers",
            "launch__occupancy_limit_shared_mem",
            "launch__occupancy_limit_warps",
            "launch__occupancy_limit_blocks",
        ]
        .iter()
        .filter_map(|m| self.value(m))
        .filter(|v| *v > 0.0)
        .reduce(f64::min)
    }

    /// SMs that can hold the kernel's clusters at once (max active
    /// clusters x cluster size / groups per SM); None without clusters.
    pub fn cluster_sms(&self) -> Option<f64> {
        let size = self.value("launch__cluster_size").filter(|s| *s > 0.0)?;
        let active = self.value("launch__cluster_max_active")?;
        Some((active * size / self.groups_per_sm()?).ceil())
    }

    /// The largest stall reason other than `selected` and its share of
    /// all stall cycles per issued instruction.
    pub fn top_stall(&self) -> Option<(String, f64)> {
        let stalls: Vec<(String, f64)> = self
            .values
            .keys()
            .filter_map(|k| {
                let reason = k.strip_prefix(STALL_PREFIX)?.strip_suffix(STALL_SUFFIX)?;
                Some((reason.to_string(), self.value(k)?))
            })
            .collect();
        let total: f64 = stalls.iter().map(|(_, v)| v).sum();
        let (reason, top) = stalls
            .iter()
            .filter(|(r, _)| r != "selected")
            .max_by(|a, b| a.1.total_cmp(&b.1))?;
        (total > 0.0).then(|| (reason.clone(), top / total))
    }
}

/// The raw pages of a directory (`*-raw.csv`, `*-raw.csv.gz`); None: none.
pub fn counter_files(dir: &Path) -> Option<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| stem_of(p).is_some())
        .collect();
    files.sort();
    (!files.is_empty()).then_some(files)
}

/// `NAME` of `NAME-raw.csv` or `NAME-raw.csv.gz`.
fn stem_of(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    let base = file.strip_suffix(".gz").unwrap_or(file);
    base.strip_suffix(RAW_SUFFIX)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// A file's text, decompressed where its name ends in `.gz`.
fn read_text(path: &Path) -> Result<String, String> {
    crate::audit::read_probe_text(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Read one raw page.
pub fn read_counters(path: &Path) -> Result<KernelCounters, String> {
    let name =
        stem_of(path).ok_or_else(|| format!("{}: not a NAME-raw.csv[.gz] file", path.display()))?;
    KernelCounters::parse(&name, &read_text(path)?).map_err(|e| format!("{}: {e}", path.display()))
}

/// The first `Metric Name  unit  value` line of a details page whose name
/// is `label`: (unit, value).
fn details_entry(details: &str, label: &str) -> Option<(String, f64)> {
    details.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix(label)?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        match fields.as_slice() {
            [unit, value] => Some((unit.to_string(), value.replace(',', "").parse().ok()?)),
            _ => None,
        }
    })
}

/// What is wrong with one raw page and its details page (empty: nothing):
/// the page parses with one kernel, its report is kept, and the details
/// page names the same kernel and shows the same duration and DRAM
/// throughput to the digits it prints.
pub fn audit_counters_file(path: &Path) -> Vec<String> {
    let counters = match read_counters(path) {
        Ok(c) => c,
        Err(e) => return vec![e],
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = &counters.name;
    let mut out = vec![];
    let report = dir.join(format!("{name}.ncu-rep"));
    if !report.is_file() && !dir.join(format!("{name}.ncu-rep.gz")).is_file() {
        out.push(format!(
            "{name}: no report {name}.ncu-rep[.gz] beside the raw page"
        ));
    }
    let details_path = dir.join(format!("{name}-details.txt"));
    let details = match read_text(&details_path) {
        Ok(d) => d,
        Err(e) => {
            out.push(format!("{name}: details page: {e}"));
            return out;
        }
    };
    if !details
        .lines()
        .any(|l| l.trim_start().starts_with(&counters.kernel))
    {
        out.push(format!(
            "{name}: the details page does not name kernel {:?}",
            counters.kernel
        ));
    }
    let raw_us = counters.duration_us();
    match details_entry(&details, "Duration") {
        Some((unit, shown)) => {
            let factor = match unit.as_str() {
                "ns" => Some(1e-3),
                "us" => Some(1.0),
                "ms" => Some(1e3),
                "s" => Some(1e6),
                _ => None,
            };
            match (factor, raw_us) {
                // The page prints 2 decimals of its unit.
                (Some(f), Some(us)) if (shown * f - us).abs() <= 0.0051 * f => {}
                _ => out.push(format!(
                    "{name}: details Duration {shown} {unit}, raw {DURATION} gives {raw_us:?} µs"
                )),
            }
        }
        None => out.push(format!("{name}: the details page has no Duration line")),
    }
    let raw_dram = counters.value(DRAM_PCT);
    match (details_entry(&details, "DRAM Throughput"), raw_dram) {
        (Some((_, shown)), Some(raw)) if (shown - raw).abs() <= 0.0051 => {}
        (shown, raw) => out.push(format!(
            "{name}: details DRAM Throughput {shown:?}, raw {DRAM_PCT} {raw:?}"
        )),
    }
    out
}

fn cell(v: Option<f64>, digits: usize) -> String {
    v.map_or("—".into(), |v| format!("{v:.digits$}"))
}

/// A markdown table of the headline counters, one row per launch.
pub fn table(launches: &[KernelCounters]) -> String {
    let mut out = String::from(
        "| launch | kernel | µs | DRAM % | DRAM TB/s | L2 % | L2→SM read sectors (M) | L2 hit % | L1 % | warps active % | registers | SMs holding clusters | top stall (share) |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for c in launches {
        let kernel: String = c.kernel.chars().take(48).collect();
        let ellipsis = if c.kernel.chars().count() > 48 {
            "…"
        } else {
            ""
        };
        let stall = c
            .top_stall()
            .map_or("—".into(), |(r, s)| format!("{r} ({:.0}%)", s * 100.0));
        out += &format!(
            "| {} | `{kernel}{ellipsis}` | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {stall} |\n",
            c.name,
            cell(c.duration_us(), 2),
            cell(c.value(DRAM_PCT), 1),
            cell(c.dram_tbps(), 2),
            cell(
                c.value("lts__throughput.avg.pct_of_peak_sustained_elapsed"),
                1
            ),
            cell(
                c.value("lts__t_sectors_srcunit_tex_op_read.sum")
                    .map(|s| s / 1e6),
                1
            ),
            cell(c.value("lts__t_sector_hit_rate.pct"), 1),
            cell(
                c.value("l1tex__throughput.avg.pct_of_peak_sustained_active"),
                1
            ),
            cell(
                c.value("sm__warps_active.avg.pct_of_peak_sustained_active"),
                1
            ),
            cell(c.value("launch__registers_per_thread"), 0),
            cell(c.cluster_sms(), 0),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A raw page in ncu's shape: quoted fields, comma-grouped numbers.
    fn page(kernel: &str, duration: &str, unit: &str, dram: &str) -> String {
        format!(
            "\"ID\",\"Kernel Name\",\"{DURATION}\",\"{DRAM_PCT}\",\"dram__bytes.sum.per_second\",\
             \"launch__cluster_size\",\"launch__cluster_max_active\",\"launch__occupancy_limit_registers\",\
             \"launch__occupancy_limit_warps\",\"lts__t_sectors_srcunit_tex_op_read.sum\",\
             \"{STALL_PREFIX}long_scoreboard{STALL_SUFFIX}\",\"{STALL_PREFIX}selected{STALL_SUFFIX}\",\
             \"{STALL_PREFIX}barrier{STALL_SUFFIX}\"\n\
             \"\",\"\",\"{unit}\",\"%\",\"Gbyte/s\",\"\",\"cluster\",\"block\",\"block\",\"sector\",\"\",\"\",\"\"\n\
             \"0\",\"{kernel}\",\"{duration}\",\"{dram}\",\"3,590.5\",\"8\",\"30\",\"2\",\"4\",\"45,679,434\",\"6\",\"1\",\"3\"\n"
        )
    }

    fn details(kernel: &str, duration: &str, unit: &str, dram: &str) -> String {
        format!(
            "[1047] lanefold@127.0.0.1\n  {kernel} (8192, 1, 1)x(512, 1, 1), Context 1\n    Section: GPU Speed Of Light Throughput\n    \
             DRAM Throughput                   %        {dram}\n    Duration                         {unit}        {duration}\n"
        )
    }

    fn write_probe(dir: &Path, name: &str, raw: &str, details_text: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let raw_path = dir.join(format!("{name}-raw.csv"));
        std::fs::write(&raw_path, raw).unwrap();
        std::fs::write(dir.join(format!("{name}-details.txt")), details_text).unwrap();
        std::fs::write(dir.join(format!("{name}.ncu-rep")), b"report").unwrap();
        raw_path
    }

    #[test]
    fn headline_counters_follow_units_and_grouped_digits() {
        let c = KernelCounters::parse("ln", &page("lf_k", "1.109632", "ms", "80.004559")).unwrap();
        assert_eq!(c.kernel, "lf_k");
        assert!((c.duration_us().unwrap() - 1109.632).abs() < 1e-9);
        assert!((c.dram_tbps().unwrap() - 3.5905).abs() < 1e-12);
        assert_eq!(
            c.value("lts__t_sectors_srcunit_tex_op_read.sum"),
            Some(45_679_434.0)
        );
        // 30 clusters of 8 groups at 2 groups per SM: 120 SMs.
        assert_eq!(c.cluster_sms(), Some(120.0));
        let (reason, share) = c.top_stall().unwrap();
        assert_eq!(reason, "long_scoreboard");
        assert!((share - 0.6).abs() < 1e-12);
        assert!(table(&[c]).contains("| ln | `lf_k` | 1109.63 | 80.0 | 3.59 |"));
    }

    #[test]
    fn a_page_without_exactly_one_kernel_is_refused() {
        let one = page("lf_k", "293.376", "us", "74.5");
        let two = format!("{one}{}", one.lines().nth(2).unwrap());
        let err = KernelCounters::parse("x", &two).unwrap_err();
        assert!(err.contains("2 kernel rows"), "{err}");
        let header_only = one.lines().next().unwrap().to_string();
        assert!(KernelCounters::parse("x", &header_only).is_err());
        let ragged = one.replace(",\"3\"\n", "\n");
        assert!(KernelCounters::parse("x", &ragged)
            .unwrap_err()
            .contains("malformed"));
    }

    #[test]
    fn audit_accepts_matching_pages_and_names_each_drift() {
        let dir = std::env::temp_dir().join(format!("lanefold-counters-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let good = write_probe(
            &dir,
            "good",
            &page("lf_k", "1.109632", "ms", "80.004559"),
            &details("lf_k", "1.11", "ms", "80.00"),
        );
        assert_eq!(audit_counters_file(&good), Vec::<String>::new());
        assert_eq!(counter_files(&dir), Some(vec![good.clone()]));

        let slow = write_probe(
            &dir,
            "slow",
            &page("lf_k", "293.376", "us", "74.51"),
            &details("lf_k", "263.81", "us", "74.51"),
        );
        let found = audit_counters_file(&slow);
        assert!(
            found.len() == 1 && found[0].contains("Duration"),
            "{found:?}"
        );

        let other = write_probe(
            &dir,
            "other",
            &page("lf_k", "293.376", "us", "74.51"),
            &details("lf_j", "293.38", "us", "82.60"),
        );
        let found = audit_counters_file(&other);
        assert!(found.iter().any(|f| f.contains("does not name kernel")));
        assert!(found.iter().any(|f| f.contains("DRAM Throughput")));

        std::fs::remove_file(dir.join("good.ncu-rep")).unwrap();
        assert!(audit_counters_file(&good)
            .iter()
            .any(|f| f.contains("no report")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
