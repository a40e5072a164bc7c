//! The shipped cost-model constants: [`ModelParams`] fitted to a target's
//! committed searches by `lanefold fit-model` (`tuning/h200-model.json`,
//! embedded). A target without a file prices plans with the defaults.
//! The file also carries the fit's report, which the mapper ignores.

use crate::cost::ModelParams;
use serde::Deserialize;
use std::sync::OnceLock;

/// The schema of a model file.
pub const MODEL_SCHEMA: &str = "lanefold-model/1";

/// The embedded model files, one per target that has one.
const FILES: &[(&str, &str)] = &[("h200", include_str!("../../../tuning/h200-model.json"))];

/// What the mapper reads of a model file.
#[derive(Deserialize)]
struct FileText {
    schema: String,
    target: String,
    params: ModelParams,
}

/// Parse a model file: its target and checked parameters. An error says
/// what is wrong (schema, a missing, unknown or out-of-bounds parameter).
pub fn parse(text: &str) -> Result<(String, ModelParams), String> {
    let file: FileText = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if file.schema != MODEL_SCHEMA {
        return Err(format!(
            "schema {:?}, expected {MODEL_SCHEMA:?}",
            file.schema
        ));
    }
    file.params.check()?;
    Ok((file.target, file.params))
}

/// Every shipped file, parsed at first use (a test holds the files to
/// parsing, so a failure here is a broken build).
fn shipped() -> &'static [(String, ModelParams)] {
    static PARAMS: OnceLock<Vec<(String, ModelParams)>> = OnceLock::new();
    PARAMS.get_or_init(|| {
        FILES
            .iter()
            .map(|(name, text)| {
                parse(text).unwrap_or_else(|e| panic!("tuning/{name}-model.json: {e}"))
            })
            .collect()
    })
}

/// The cost model's constants for the target named `target`: the shipped
/// fit, else the defaults.
pub fn params(target: &str) -> ModelParams {
    shipped()
        .iter()
        .find(|(t, _)| t == target)
        .map_or_else(ModelParams::default, |(_, p)| *p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_files_parse_and_name_their_target() {
        for (name, text) in FILES {
            let (target, p) = parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(target, *name);
            assert_eq!(params(name), p);
        }
        assert_eq!(params("cpu"), ModelParams::default());
    }

    #[test]
    fn parameters_round_trip_through_the_file_form() {
        let p = ModelParams {
            tail: 0.2,
            occupancy_threads: 384.0,
            ..ModelParams::default()
        };
        let text = serde_json::json!({
            "schema": MODEL_SCHEMA,
            "target": "h200",
            "params": p,
            "fit": {"anything": "the mapper ignores"},
        })
        .to_string();
        assert_eq!(parse(&text), Ok(("h200".to_string(), p)));
        assert_eq!(ModelParams::from_values(&p.values()), Ok(p));
    }

    #[test]
    fn bad_files_are_refused_saying_why() {
        let file = |params: serde_json::Value, schema: &str| {
            serde_json::json!({"schema": schema, "target": "h200", "params": params}).to_string()
        };
        let good = serde_json::to_value(ModelParams::default()).unwrap();
        assert!(parse(&file(good.clone(), MODEL_SCHEMA)).is_ok());
        let e = parse(&file(good.clone(), "lanefold-model/0")).unwrap_err();
        assert!(e.contains("schema"), "{e}");
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove("tail");
        let e = parse(&file(missing, MODEL_SCHEMA)).unwrap_err();
        assert!(e.contains("missing field `tail`"), "{e}");
        let mut unknown = good.clone();
        unknown["tale"] = 0.1.into();
        let e = parse(&file(unknown, MODEL_SCHEMA)).unwrap_err();
        assert!(e.contains("unknown field `tale`"), "{e}");
        let mut out = good.clone();
        out["tail"] = 2.0.into();
        let e = parse(&file(out, MODEL_SCHEMA)).unwrap_err();
        assert!(e.contains("tail = 2 is outside"), "{e}");
        let mut unordered = good;
        unordered["access_4b"] = 0.95.into();
        let e = parse(&file(unordered, MODEL_SCHEMA)).unwrap_err();
        assert!(
            e.contains("access_8b = 0.9 is below access_4b = 0.95"),
            "{e}"
        );
        assert!(parse("{").is_err());
        assert!(ModelParams::from_values(&[1.0]).is_err());
    }
}
