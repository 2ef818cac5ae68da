//! What `kubewasm test` prints (text or JUnit XML) and how `--update` rewrites a scenario.

use std::fmt::Write as _;
use std::time::Duration;

use super::file::Scenario;
use super::harness::RunOutcome;

/// One scenario file's run, for reporting.
pub struct FileResult<'a> {
    /// The scenario.
    pub scenario: &'a Scenario,
    /// How it went.
    pub outcome: RunOutcome,
    /// Wall time.
    pub elapsed: Duration,
}

/// The accounts a run's `kube` calls acted as, on a line of their own (none: no line).
fn acting_as(out: &mut String, outcome: &RunOutcome) {
    if !outcome.acting_as.is_empty() {
        let _ = writeln!(
            out,
            "  kube calls acted as: {}",
            outcome.acting_as.join(", ")
        );
    }
}

/// Human-readable report: one line per passing file, the differences of a failing one, with
/// the failing steps' actual transcripts.
pub fn text(results: &[FileResult<'_>]) -> String {
    let mut out = String::new();
    for r in results {
        let path = r.scenario.path.display();
        let secs = r.elapsed.as_secs_f64();
        if r.outcome.passed() {
            let _ = writeln!(
                out,
                "PASS {path} ({} steps, {secs:.2} s)",
                r.outcome.steps.len()
            );
            acting_as(&mut out, &r.outcome);
            continue;
        }
        let _ = writeln!(out, "FAIL {path} ({secs:.2} s)");
        for s in r.outcome.steps.iter().filter(|s| !s.diffs.is_empty()) {
            let at = if s.line > 0 {
                format!("{path}:{}", s.line)
            } else {
                format!("{path} (implied start)")
            };
            let _ = writeln!(out, "  step {}: {at}", s.label);
            let _ = writeln!(out, "    expected (-) vs actual (+):");
            for d in &s.diffs {
                let _ = writeln!(out, "      {d}");
            }
            let _ = writeln!(out, "    the step's whole transcript:");
            if s.actual.is_empty() {
                let _ = writeln!(out, "      (nothing)");
            }
            for e in &s.actual {
                let _ = writeln!(out, "      - {}", e.render());
            }
        }
        if let Some(e) = &r.outcome.error {
            let _ = writeln!(out, "  error: {e}");
        }
        acting_as(&mut out, &r.outcome);
    }
    let failed = results.iter().filter(|r| !r.outcome.passed()).count();
    let _ = writeln!(
        out,
        "{} scenario(s): {} passed, {failed} failed",
        results.len(),
        results.len() - failed
    );
    out
}

fn xml(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => o.push(c),
        }
    }
    o
}

/// JUnit XML: one test suite for the handler, one test case per scenario file.
pub fn junit(handler: &str, results: &[FileResult<'_>]) -> String {
    let failures = results.iter().filter(|r| !r.outcome.passed()).count();
    let total: f64 = results.iter().map(|r| r.elapsed.as_secs_f64()).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"kubewasm test\" tests=\"{}\" failures=\"{failures}\" time=\"{total:.3}\">",
        results.len()
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" time=\"{total:.3}\">",
        xml(handler),
        results.len()
    );
    for r in results {
        let name = r.scenario.path.display().to_string();
        let _ = write!(
            out,
            "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\"",
            xml(&name),
            xml(handler),
            r.elapsed.as_secs_f64()
        );
        if r.outcome.passed() {
            out.push_str("/>\n");
            continue;
        }
        let detail = text(std::slice::from_ref(r));
        let message = r
            .outcome
            .error
            .clone()
            .unwrap_or_else(|| "the transcript differs from the expectations".into());
        let _ = writeln!(
            out,
            ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
            xml(&message),
            xml(&detail)
        );
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

/// Why a scenario's text could not be rewritten with its transcript.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// The text no longer parses as YAML, or the result cannot be written as YAML.
    #[error(transparent)]
    Yaml(#[from] serde_yaml::Error),
    /// The document is not a map.
    #[error("the scenario is not a map")]
    NotAMap,
    /// `steps` is there but not a list.
    #[error("steps is not a list")]
    StepsNotAList,
}

/// The scenario's text with every step's `expect` replaced by its actual transcript (an
/// implied start becomes an explicit first step). The inputs are kept; comments are not (the
/// file is written anew from its parsed form).
pub fn updated(scenario: &Scenario, outcome: &RunOutcome) -> Result<String, UpdateError> {
    let mut doc: serde_yaml::Value = serde_yaml::from_str(&scenario.text)?;
    let map = doc.as_mapping_mut().ok_or(UpdateError::NotAMap)?;
    if scenario.refused.is_some() {
        // A refusal scenario has no steps: its expectation is the list of missing grants
        // (left as it was when the handler now loads, so the run keeps failing).
        if let Some(missing) = &outcome.refused {
            let mut refused = serde_yaml::Mapping::new();
            refused.insert("missing".into(), serde_yaml::to_value(missing)?);
            map.insert("refused".into(), serde_yaml::Value::Mapping(refused));
        }
        return Ok(serde_yaml::to_string(&doc)?);
    }
    let steps_key = serde_yaml::Value::from("steps");
    if !map.contains_key(&steps_key) {
        map.insert(steps_key.clone(), serde_yaml::Value::Sequence(Vec::new()));
    }
    let steps = map
        .get_mut(&steps_key)
        .and_then(serde_yaml::Value::as_sequence_mut)
        .ok_or(UpdateError::StepsNotAList)?;
    let mut rendered = Vec::new();
    let mut placeholder = |entries: &[super::transcript::Entry]| {
        serde_yaml::Value::Sequence(
            entries
                .iter()
                .map(|e| {
                    rendered.push(e.as_expectation().render());
                    serde_yaml::Value::from(format!("KUBEWASM_ENTRY_{}_", rendered.len() - 1))
                })
                .collect(),
        )
    };
    let mut implied = None;
    for s in &outcome.steps {
        let expect = placeholder(&s.actual);
        match s.index {
            Some(i) => {
                if let Some(step) = steps.get_mut(i).and_then(serde_yaml::Value::as_mapping_mut) {
                    step.insert("expect".into(), expect);
                }
            }
            None => implied = Some(expect),
        }
    }
    if let Some(expect) = implied {
        let mut start = serde_yaml::Mapping::new();
        start.insert(
            "start".into(),
            serde_yaml::Value::Mapping(serde_yaml::Mapping::new()),
        );
        start.insert("expect".into(), expect);
        steps.insert(0, serde_yaml::Value::Mapping(start));
    }
    let mut text = serde_yaml::to_string(&doc)?;
    for (i, r) in rendered.iter().enumerate().rev() {
        text = text.replace(&format!("KUBEWASM_ENTRY_{i}_"), r);
    }
    Ok(text)
}
