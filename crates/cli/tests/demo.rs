//! The README's main command: on a machine without a GPU the demo says so
//! in one line, validates every problem against float64, compares with the
//! host's memcpy, and ends with the line that says what was shown.

mod common;
use common::{lanefold, text};

#[test]
fn demo_on_the_cpu_validates_and_says_what_it_showed() {
    let o = lanefold(&["demo", "--backend", "cpu"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("host memcpy"), "{out}");
    assert_eq!(out.matches(" yes ").count(), 7, "{out}");
    let last = out
        .lines()
        .rev()
        .find(|l| l.starts_with("Shown:"))
        .unwrap_or("");
    assert!(
        last.contains("7 problems validated against float64"),
        "{out}"
    );
    assert!(!out.contains("/usr/lib"), "no loader search path: {out}");
}
