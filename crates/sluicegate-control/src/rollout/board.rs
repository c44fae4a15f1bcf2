//! The rollouts' state, kept by route name across reloads: each route
//! with a `rollout`, its rule, its split's services and weights as the
//! running config has them, its state, the last windows' figures, the
//! window being measured and its counters of steps and rollbacks.
//!
//! A reload keeps a route's state when its rollout block and its split's
//! services are unchanged (a change of weights only, the rollout's own or
//! anyone's, restarts the window being measured); any other change starts
//! the rollout afresh.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sluicegate_config::{Action, Config, Rollout};
use utoipa::ToSchema;

use super::judge::{Side, Tally, Verdict};
use super::weights::share;

/// Windows kept per route for the API.
pub(crate) const KEEP: usize = 10;

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum State {
    /// Windows are judged; good ones step.
    Running,
    /// Set by `PUT .../rollout`: nothing is judged.
    Paused,
    /// The canary has 100: nothing more to do.
    Promoted,
    /// A window was bad: the canary is at 0 until restarted.
    RolledBack,
}

impl State {
    pub(crate) const ALL: [State; 4] = [
        State::Running,
        State::Paused,
        State::Promoted,
        State::RolledBack,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Paused => "paused",
            State::Promoted => "promoted",
            State::RolledBack => "rolled_back",
        }
    }
}

/// One judged (or skipped) window, as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct Window {
    /// Unix time (ms) it started and ended.
    pub start_ms: u64,
    pub end_ms: u64,
    /// The canary's share during the window, in percentage points.
    pub weight: u32,
    pub canary: Side,
    /// Every entry but the last, together.
    pub baseline: Side,
    pub verdict: Verdict,
}

/// The window being measured: when it started, under which weights, and
/// the counters then.
#[derive(Debug, Clone)]
pub(crate) struct Open {
    pub at: Instant,
    pub at_ms: u64,
    pub weights: Vec<u64>,
    pub canary: Tally,
    pub baseline: Tally,
}

/// One route's rollout.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub rule: Rollout,
    /// The split's services, the canary last.
    pub services: Vec<String>,
    /// Their weights in the running config.
    pub weights: Vec<u64>,
    pub state: State,
    pub windows: VecDeque<Window>,
    pub steps: u64,
    pub rollbacks: u64,
    /// Only on the leader, while running.
    pub open: Option<Open>,
}

impl Entry {
    /// The canary's share, in percentage points.
    pub(crate) fn weight(&self) -> u32 {
        share(&self.weights)
    }

    fn fresh(rule: Rollout, services: Vec<String>, weights: Vec<u64>) -> Entry {
        let state = if share(&weights) >= 100 {
            State::Promoted
        } else {
            State::Running
        };
        Entry {
            rule,
            services,
            weights,
            state,
            windows: VecDeque::new(),
            steps: 0,
            rollbacks: 0,
            open: None,
        }
    }

    pub(crate) fn record(&mut self, w: Window) {
        if self.windows.len() == KEEP {
            self.windows.pop_front();
        }
        self.windows.push_back(w);
    }
}

/// Every route's rollout, and whether this gateway leads.
#[derive(Default)]
pub struct Board {
    pub(crate) routes: Mutex<BTreeMap<String, Entry>>,
    /// Whether this gateway judges windows and writes weights (always,
    /// without etcd).
    pub(crate) leader: AtomicBool,
    /// Whether leadership is through etcd (otherwise this gateway leads).
    pub(crate) fleet: AtomicBool,
    /// The leader key and lease this gateway's writes compare, while it
    /// leads a fleet.
    pub(crate) fence: Mutex<Option<super::Fence>>,
}

/// Unix time now, in ms.
pub(crate) fn now_ms() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Board {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Acquire)
    }

    /// Takes in a config just applied: new rollouts start, changed ones
    /// start again, those with only new weights keep their state (their
    /// window restarts), those gone are dropped.
    pub(crate) fn observe(&self, cfg: &Config) {
        let mut routes = self.lock();
        let mut seen = BTreeMap::new();
        for r in &cfg.routes {
            let (
                Some(rule),
                Action::Proxy {
                    split: Some(split), ..
                },
            ) = (&r.rollout, &r.action)
            else {
                continue;
            };
            let services: Vec<String> = split.entries.iter().map(|e| e.service.clone()).collect();
            let weights: Vec<u64> = split.entries.iter().map(|e| u64::from(e.weight)).collect();
            let entry = match routes.remove(&r.name) {
                Some(mut e) if e.rule == *rule && e.services == services => {
                    if e.weights != weights {
                        e.weights = weights;
                        e.open = None;
                        if e.weight() >= 100 {
                            e.state = State::Promoted;
                        }
                    }
                    e
                }
                _ => Entry::fresh(rule.clone(), services, weights),
            };
            seen.insert(r.name.clone(), entry);
        }
        *routes = seen;
    }

    /// The Prometheus lines of the rollouts.
    pub fn render(&self) -> String {
        let routes = self.lock();
        let mut out = String::new();
        out.push_str(
            "# HELP sluicegate_rollout_leader 1 while this gateway judges the rollouts' windows.\n\
             # TYPE sluicegate_rollout_leader gauge\n",
        );
        let _ = writeln!(
            out,
            "sluicegate_rollout_leader {}",
            u8::from(self.is_leader())
        );
        if routes.is_empty() {
            return out;
        }
        // One line per route: a family of one value each.
        let per_route =
            |out: &mut String, name: &str, kind: &str, help: &str, get: fn(&Entry) -> u64| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                for (route, e) in routes.iter() {
                    let _ = writeln!(out, "{name}{{route=\"{}\"}} {}", esc(route), get(e));
                }
            };
        per_route(
            &mut out,
            "sluicegate_rollout_weight",
            "gauge",
            "The canary's share of its route, in percentage points.",
            |e| u64::from(e.weight()),
        );
        out.push_str(
            "# HELP sluicegate_rollout_state 1 for the state each rollout is in.\n\
             # TYPE sluicegate_rollout_state gauge\n",
        );
        for (name, e) in routes.iter() {
            for s in State::ALL {
                let _ = writeln!(
                    out,
                    "sluicegate_rollout_state{{route=\"{}\",state=\"{}\"}} {}",
                    esc(name),
                    s.as_str(),
                    u8::from(e.state == s)
                );
            }
        }
        per_route(
            &mut out,
            "sluicegate_rollout_steps_total",
            "counter",
            "Steps this gateway wrote.",
            |e| e.steps,
        );
        per_route(
            &mut out,
            "sluicegate_rollout_rollbacks_total",
            "counter",
            "Rollbacks this gateway wrote.",
            |e| e.rollbacks,
        );
        out
    }
}

/// A label value escaped for the Prometheus text format.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(split: &str, rollout: &str) -> Config {
        let routes = format!("  - name: orders\n    split: {split}\n    rollout: {rollout}\n");
        let text = crate::rollout::test_config(&["v1", "v2", "v3"], &routes);
        sluicegate_config::parse(&text).unwrap()
    }

    const RULE: &str = "{ step: 10, every: 1s }";

    #[test]
    fn a_reload_keeps_the_state_unless_the_rollout_or_services_change() {
        let b = Board::default();
        b.observe(&cfg(
            "[{ service: v1, weight: 90 }, { service: v2, weight: 10 }]",
            RULE,
        ));
        {
            let mut r = b.lock();
            let e = r.get_mut("orders").unwrap();
            assert_eq!((e.weight(), e.state), (10, State::Running));
            e.state = State::Paused;
            e.steps = 3;
            e.open = Some(Open {
                at: Instant::now(),
                at_ms: 0,
                weights: vec![90, 10],
                canary: Tally::default(),
                baseline: Tally::default(),
            });
        }
        // New weights only: state kept, the window restarts.
        b.observe(&cfg(
            "[{ service: v1, weight: 80 }, { service: v2, weight: 20 }]",
            RULE,
        ));
        {
            let r = b.lock();
            let e = &r["orders"];
            assert_eq!((e.weight(), e.state, e.steps), (20, State::Paused, 3));
            assert!(e.open.is_none());
        }
        // Weights at 100: promoted.
        b.observe(&cfg(
            "[{ service: v1, weight: 0 }, { service: v2, weight: 100 }]",
            RULE,
        ));
        assert_eq!(b.lock()["orders"].state, State::Promoted);
        // Another rule: afresh.
        b.observe(&cfg(
            "[{ service: v1, weight: 80 }, { service: v2, weight: 20 }]",
            "{ step: 20, every: 1s }",
        ));
        let e = b.lock()["orders"].clone();
        assert_eq!((e.state, e.steps), (State::Running, 0));
        b.lock().get_mut("orders").unwrap().steps = 1;
        // Other services: afresh.
        b.observe(&cfg(
            "[{ service: v1, weight: 80 }, { service: v3, weight: 20 }]",
            "{ step: 20, every: 1s }",
        ));
        assert_eq!(b.lock()["orders"].steps, 0);
        // Gone with its route's rollout.
        let text = "listen: 127.0.0.1:8080\nservices:\n  - name: v1\n    endpoints: [\"127.0.0.1:9001\"]\nroutes:\n  - name: orders\n    service: v1\n";
        b.observe(&sluicegate_config::parse(text).unwrap());
        assert!(b.lock().is_empty());
    }

    #[test]
    fn metrics_show_weight_state_and_counts() {
        let b = Board::default();
        b.observe(&cfg(
            "[{ service: v1, weight: 95 }, { service: v2, weight: 5 }]",
            RULE,
        ));
        b.lock().get_mut("orders").unwrap().rollbacks = 2;
        let text = b.render();
        for line in [
            "sluicegate_rollout_leader 0",
            "sluicegate_rollout_weight{route=\"orders\"} 5",
            "sluicegate_rollout_state{route=\"orders\",state=\"running\"} 1",
            "sluicegate_rollout_state{route=\"orders\",state=\"paused\"} 0",
            "sluicegate_rollout_steps_total{route=\"orders\"} 0",
            "sluicegate_rollout_rollbacks_total{route=\"orders\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }
}
