//! scripts/scoreboard.py, the generator of docs/scoreboard/README.md and its plot: run on a
//! few recorded lines (tests/scoreboard/tiny-mem.jsonl: adaptive and leveldb's load and
//! first update phase at 1 KiB pairs, scavenger's load alone, and a closing line of no
//! operations), and its `--recheck` on the committed page and on a page whose lines changed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scoreboard/tiny-mem.jsonl")
}

fn scoreboard(args: &[&str]) -> Output {
    Command::new("python3")
        .arg(repo().join("scripts/scoreboard.py"))
        .args(args)
        .output()
        .expect("python3 runs scripts/scoreboard.py (CI installs python3)")
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "scoreboard.py failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A directory holding a copy of the fixture and the page generated from it.
fn generated() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture(), dir.path().join("tiny-mem.jsonl")).unwrap();
    let d = dir.path().to_str().unwrap();
    ok(&scoreboard(&[
        "--dir",
        d,
        "--commit",
        "abc1234",
        &format!("{d}/tiny-mem.jsonl"),
    ]));
    dir
}

/// The fixture's rows by engine and phase, read here independently of the script.
fn row(engine: &str, phase: &str) -> serde_json::Value {
    std::fs::read_to_string(fixture())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["engine"] == engine && r["phase"] == phase)
        .unwrap_or_else(|| panic!("no {engine} {phase} in the fixture"))
}

fn kops(r: &serde_json::Value) -> f64 {
    r["ops"].as_f64().unwrap() / r["elapsed_s"].as_f64().unwrap() / 1e3
}

#[test]
fn the_page_has_the_header_rows_and_plot_of_its_lines() {
    let dir = generated();
    let page = std::fs::read_to_string(dir.path().join("README.md")).unwrap();
    let lines: Vec<&str> = page.lines().collect();
    assert_eq!(
        lines[0],
        "<!-- scoreboard.py inputs: tiny-mem.jsonl; commit: abc1234 -->"
    );
    assert_eq!(lines[1], "# Scoreboard");
    assert!(page.contains("at\ncommit abc1234") || page.contains("at commit abc1234"));
    assert!(page.contains(
        "ENGINES=adaptive,leveldb,scavenger VALUES=\"1000\" WORKLOADS=\"update\" \
         REGIMES=\"mem\" scripts/bench-matrix.sh"
    ));
    assert!(lines.contains(&"| data | adaptive | leveldb | scavenger |"));
    assert!(page.contains(
        "![updates per engine: thousands of ops/s and write amplification](current.svg)"
    ));

    // Throughput: the load's, then the updates' (one phase here); the best updates in bold;
    // scavenger has no update line and says where it stopped.
    let (a0, a1) = (row("adaptive", "update.P0"), row("adaptive", "update.P1"));
    let (l0, l1) = (row("leveldb", "update.P0"), row("leveldb", "update.P1"));
    let s0 = row("scavenger", "update.P0");
    assert!(
        kops(&a1) > kops(&l1),
        "the fixture's best updates are adaptive's"
    );
    let want = format!(
        "| 1 KiB pairs, mem | {:.0} / **{:.0}** | {:.0} / {:.0} | {:.0} / - (stopped after update.P0) |",
        kops(&a0),
        kops(&a1),
        kops(&l0),
        kops(&l1),
        kops(&s0)
    );
    assert!(lines.contains(&want.as_str()), "no row {want:?} in\n{page}");

    // Amplification: the updates' engine bytes over the user's, the worst space
    // amplification at a phase's last write, the peak RSS.
    let wa = |r: &serde_json::Value| {
        r["engine_bytes_written"].as_f64().unwrap() / r["user_bytes_written"].as_f64().unwrap()
    };
    let sa = |rs: &[&serde_json::Value]| {
        rs.iter()
            .map(|r| r["space_amp_before_settle"].as_f64().unwrap())
            .fold(0.0, f64::max)
    };
    let rss = |rs: &[&serde_json::Value]| {
        rs.iter()
            .map(|r| r["peak_rss_bytes"].as_f64().unwrap())
            .fold(0.0, f64::max)
            / (1u64 << 20) as f64
    };
    let want = format!(
        "| 1 KiB pairs, mem | {:.2} / {:.2} / {:.0} | {:.2} / {:.2} / {:.0} | - / {:.2} / {:.0} (stopped after update.P0) |",
        wa(&a1),
        sa(&[&a0, &a1]),
        rss(&[&a0, &a1]),
        wa(&l1),
        sa(&[&l0, &l1]),
        rss(&[&l0, &l1]),
        sa(&[&s0]),
        rss(&[&s0])
    );
    assert!(lines.contains(&want.as_str()), "no row {want:?} in\n{page}");
    assert!(page.contains("stopped after a phase has no line for the later"));

    // The plot: a legend entry per engine and, per panel (ops/s, write amplification), a bar
    // per engine that has update phases, titled with its figure.
    let svg = std::fs::read_to_string(dir.path().join("current.svg")).unwrap();
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    for e in ["adaptive", "leveldb", "scavenger"] {
        assert!(svg.contains(&format!(">{e}</text>")), "no legend for {e}");
    }
    assert_eq!(svg.matches("class=\"bar\"").count(), 4, "{svg}");
    for title in [
        format!("<title>adaptive: {:.0}</title>", kops(&a1)),
        format!("<title>leveldb: {:.0}</title>", kops(&l1)),
        format!("<title>adaptive: {:.2}</title>", wa(&a1)),
        format!("<title>leveldb: {:.2}</title>", wa(&l1)),
    ] {
        assert!(svg.contains(&title), "no bar {title} in the plot");
    }
    assert!(!svg.contains("<title>scavenger"));
}

#[test]
fn recheck_passes_on_the_committed_page() {
    let dir = repo().join("docs/scoreboard");
    ok(&scoreboard(&["--recheck", "--dir", dir.to_str().unwrap()]));
}

#[test]
fn recheck_fails_when_the_page_drifts_from_its_lines() {
    let dir = generated();
    let d = dir.path().to_str().unwrap();
    ok(&scoreboard(&["--recheck", "--dir", d]));

    // A line measured again: the page no longer shows its file.
    let jsonl = dir.path().join("tiny-mem.jsonl");
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let elapsed = row("leveldb", "update.P1")["elapsed_s"].to_string();
    let changed = text.replacen(
        &format!("\"elapsed_s\":{elapsed}"),
        "\"elapsed_s\":100.0",
        1,
    );
    assert_ne!(changed, text, "the fixture has leveldb's P1 elapsed time");
    std::fs::write(&jsonl, changed).unwrap();
    let out = scoreboard(&["--recheck", "--dir", d]);
    assert!(!out.status.success(), "recheck passed a page that drifted");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("README.md:") && err.contains("drifted from tiny-mem.jsonl"),
        "{err}"
    );

    // A page edited by hand, and a page that names no inputs.
    ok(&scoreboard(&[
        "--dir",
        d,
        "--commit",
        "abc1234",
        jsonl.to_str().unwrap(),
    ]));
    let page = dir.path().join("README.md");
    let text = std::fs::read_to_string(&page).unwrap();
    std::fs::write(&page, text.replace("# Scoreboard", "# Scoreboard!")).unwrap();
    assert!(!scoreboard(&["--recheck", "--dir", d]).status.success());
    std::fs::write(&page, "# Scoreboard\n").unwrap();
    let out = scoreboard(&["--recheck", "--dir", d]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("names no inputs"));
}
