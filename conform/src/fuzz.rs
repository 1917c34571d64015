//! The remote fuzzer: seeded cases of mutated RC requests ([`crate::fuzz_case`]) sent to a
//! target's QP, each answer checked against uroce's transport as the model
//! ([`crate::fuzz_oracle`]), and the target watched for a peer that stops answering.
//!
//! Per case: a fresh model ([`SimTarget`], virtual time, deterministic) and a fresh
//! target from the caller's [`MakeTarget`] each run the case; what they did is compared;
//! a difference is a [`Finding`], saved as a scenario (`<seed>-<case>.toml` in
//! [`FuzzConfig::out`]) that replays the packets and expects what the model did, so
//! `uroce-conform run FILE` on the target shows it again. After every case a liveness
//! probe (a valid SEND Only with AckReq to a fresh QP must be ACKed within
//! [`FuzzConfig::probe_within`]) checks the target still answers; when it does not, that
//! is a [`Class::PeerDead`] finding and the run ends there.
//!
//! ```
//! use std::time::Duration;
//! use uroce_conform::fuzz::{fuzz, FuzzConfig};
//! use uroce_conform::sim::SimTarget;
//! use uroce_conform::Target;
//! let cfg = FuzzConfig { cases: 20, ..FuzzConfig::new(5) };
//! let mut make = || SimTarget::new(2).map(|t| Box::new(t) as Box<dyn Target>);
//! let summary = fuzz(&cfg, &mut make, |_| {});
//! assert!(summary.findings.is_empty() && summary.peer_alive, "{}", summary.report());
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::fuzz_case::Case;
use crate::fuzz_oracle::{compare, observe, replay_text, Difference, Observation};
use crate::sim::SimTarget;
use crate::target::{Target, TargetResult};
use crate::{run, Scenario};

pub use crate::fuzz_oracle::Class;

/// Makes a fresh target (a fresh QP on the stack under test) for each case and probe.
pub type MakeTarget<'a> = dyn FnMut() -> TargetResult<Box<dyn Target>> + 'a;

/// A fuzz run's settings.
#[derive(Clone, Debug)]
pub struct FuzzConfig {
    /// The run's seed: case N is [`Case::generate`]`(seed, N)`.
    pub seed: u64,
    /// Cases to run at most.
    pub cases: u64,
    /// Wall-clock time to run at most (`None`: until `cases`).
    pub time: Option<Duration>,
    /// How long to wait after each packet for its answers (the target's clock).
    pub window: Duration,
    /// How long the liveness probe waits for its ACK.
    pub probe_within: Duration,
    /// Where findings are saved (`None`: not saved).
    pub out: Option<PathBuf>,
    /// Most finding files written; later findings are counted and reported only.
    pub max_saved: usize,
    /// Most finding files written per kind of difference ([`Difference::kind`]).
    pub per_kind: usize,
    /// The seed of the model's simulated device.
    pub model_seed: u64,
}

impl FuzzConfig {
    /// 1000 cases from `seed`, a 10 ms answer window, a 1 s probe, nothing saved (when
    /// saving: at most 200 files, 3 per kind).
    pub fn new(seed: u64) -> FuzzConfig {
        FuzzConfig {
            seed,
            cases: 1000,
            time: None,
            window: Duration::from_millis(10),
            probe_within: Duration::from_secs(1),
            out: None,
            max_saved: 200,
            per_kind: 3,
            model_seed: 1,
        }
    }
}

/// One difference found.
#[derive(Clone, Debug)]
pub struct Finding {
    /// The run's seed.
    pub seed: u64,
    /// The case's number.
    pub case: u64,
    /// The class of the first difference.
    pub class: Class,
    /// Every difference.
    pub differences: Vec<Difference>,
    /// The replay scenario's text.
    pub scenario: String,
    /// Where it was saved.
    pub file: Option<PathBuf>,
}

impl Finding {
    /// The kind of its first difference.
    pub fn kind(&self) -> &str {
        self.differences.first().map_or("", |d| d.kind.as_str())
    }

    /// One line: `seed-case [class] first difference (-> file)`.
    pub fn line(&self) -> String {
        let mut s = format!(
            "finding {}-{} [{}] {}",
            self.seed,
            self.case,
            self.class,
            self.differences.first().map_or("", |d| d.what.as_str())
        );
        if let Some(f) = &self.file {
            let _ = write!(s, " -> {}", f.display());
        }
        s
    }
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The run's seed.
    pub seed: u64,
    /// The target's description.
    pub target: String,
    /// Cases run (model and target both).
    pub cases: u64,
    /// Cases the model itself could not run (a generator bug; reported, not findings).
    pub skipped: u64,
    /// The findings, in case order.
    pub findings: Vec<Finding>,
    /// False when the liveness probe failed (the run ended there).
    pub peer_alive: bool,
    /// Wall-clock time taken.
    pub took: Duration,
}

impl Summary {
    /// Findings per class.
    pub fn by_class(&self) -> BTreeMap<Class, usize> {
        let mut m = BTreeMap::new();
        for f in &self.findings {
            *m.entry(f.class).or_insert(0) += 1;
        }
        m
    }

    /// Findings per kind ([`Finding::kind`]): how many, and the first one's case.
    pub fn by_kind(&self) -> BTreeMap<&str, (usize, u64)> {
        let mut m = BTreeMap::new();
        for f in &self.findings {
            m.entry(f.kind()).or_insert((0, f.case)).0 += 1;
        }
        m
    }

    /// The report's last lines: cases, findings by class and by kind, liveness.
    pub fn report(&self) -> String {
        let mut kinds = String::new();
        for (k, (n, first)) in self.by_kind() {
            let _ = writeln!(kinds, "fuzz: {n:>5} x {k} (first: {}-{first})", self.seed);
        }
        let classes: Vec<String> = self
            .by_class()
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        format!(
            "fuzz: seed {} on {}: {} cases in {:.1} s ({} skipped), {} findings{}\n{kinds}fuzz: {}",
            self.seed,
            self.target,
            self.cases,
            self.took.as_secs_f64(),
            self.skipped,
            self.findings.len(),
            if classes.is_empty() {
                String::new()
            } else {
                format!(" ({})", classes.join(", "))
            },
            if self.peer_alive {
                "the peer answered the liveness probe after every case".to_string()
            } else {
                let last = self.findings.last().map_or(0, |f| f.case);
                format!(
                    "the peer STOPPED ANSWERING after case {last}: replay with --seed {} (finding {}-{last})",
                    self.seed, self.seed
                )
            }
        )
    }
}

/// The liveness probe: a valid SEND Only with AckReq to a fresh QP, ACKed within `within`.
pub fn probe(make: &mut MakeTarget, within: Duration) -> Result<(), String> {
    let text = format!(
        "rule = \"liveness: a valid SEND Only with AckReq to a fresh QP is ACKed\"\n\
         [[mr]]\nname = \"buf\"\nlen = 64\n\
         [[step]]\npost_recv = {{ wr_id = 1, mr = \"buf\", len = 64 }}\n\
         [[step]]\nsend = {{ opcode = \"RC_SEND_ONLY\", psn = 0x100, ack_req = true, payload_len = 8 }}\n\
         [[step]]\nexpect = {{ opcode = \"RC_ACKNOWLEDGE\", syndrome = \"ack\", psn = 0x100, within = \"{}us\" }}\n",
        within.as_micros()
    );
    let s = Scenario::parse("liveness", &text).map_err(|e| e.to_string())?;
    let mut t = make().map_err(|e| format!("making a target: {e}"))?;
    run(&s, &mut *t).result.map_err(|f| f.to_string())
}

/// Runs the fuzzer: cases `0..cfg.cases` (or until `cfg.time`) against targets from
/// `make`, calling `on_finding` for each finding as it is found.
pub fn fuzz(
    cfg: &FuzzConfig,
    make: &mut MakeTarget,
    mut on_finding: impl FnMut(&Finding),
) -> Summary {
    let start = Instant::now();
    let mut sum = Summary {
        seed: cfg.seed,
        target: String::new(),
        cases: 0,
        skipped: 0,
        findings: Vec::new(),
        peer_alive: true,
        took: Duration::ZERO,
    };
    for index in 0..cfg.cases {
        if cfg.time.is_some_and(|t| start.elapsed() >= t) {
            break;
        }
        let case = Case::generate(cfg.seed, index);
        let Ok(s) = case.scenario() else {
            sum.skipped += 1;
            continue;
        };
        let model = match SimTarget::new(cfg.model_seed) {
            Ok(mut m) => observe(&s, &mut m, cfg.window),
            Err(_) => {
                sum.skipped += 1;
                continue;
            }
        };
        if model.error.is_some() {
            sum.skipped += 1;
            continue;
        }
        let got = match make() {
            Ok(mut t) => {
                if sum.target.is_empty() {
                    sum.target = t.describe();
                }
                observe(&s, &mut *t, cfg.window)
            }
            Err(e) => Observation {
                error: Some((0, format!("making a target: {e}"))),
                ..Observation::default()
            },
        };
        sum.cases += 1;
        let mut diffs = compare(&case, &model, &got);
        let alive = probe(make, cfg.probe_within);
        if let Err(why) = &alive {
            diffs.push(Difference {
                class: Class::PeerDead,
                kind: Class::PeerDead.to_string(),
                what: format!("after this case the liveness probe failed: {why}"),
            });
        }
        if !diffs.is_empty() {
            let scenario = replay_text(&case, &model, &got, &diffs, cfg.window, &sum.target);
            let saved = sum.findings.iter().filter(|f| f.file.is_some());
            let same = saved.clone().filter(|f| f.kind() == diffs[0].kind).count();
            let room = saved.count() < cfg.max_saved && same < cfg.per_kind;
            let file = cfg.out.as_ref().filter(|_| room).and_then(|dir| {
                let f = dir.join(format!("{}-{}.toml", cfg.seed, index));
                std::fs::create_dir_all(dir)
                    .and_then(|()| std::fs::write(&f, &scenario))
                    .ok()
                    .map(|()| f)
            });
            let finding = Finding {
                seed: cfg.seed,
                case: index,
                class: if alive.is_err() {
                    Class::PeerDead
                } else {
                    diffs[0].class
                },
                differences: diffs,
                scenario,
                file,
            };
            on_finding(&finding);
            sum.findings.push(finding);
        }
        if alive.is_err() {
            sum.peer_alive = false;
            break;
        }
    }
    sum.took = start.elapsed();
    sum
}
