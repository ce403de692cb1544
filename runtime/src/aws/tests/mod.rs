//! The AWS control plane: the reconciler and observer on their own (pure,
//! `units`), and the whole loop (`scenarios`) against an EC2 stand-in on
//! loopback (`moto`: moto's server, which scripts/test starts) and, when
//! asked, against AWS (`e2e`); the credentials of every source
//! (`credentials`) and what the nodes' are narrowed to (`policy`).

mod credentials;
mod e2e;
mod moto;
mod policy;
mod scenarios;
mod ssh;
mod standin;
mod units;

use super::plan::Plan;
use crate::policy::{Action, Engine, Event, GroupSpec, Timer};
use std::time::Duration;

/// A primary of two nodes and an auxiliary that outlives it by 30 s.
pub(super) const GROUP: &str = "\
name: g
execution: parallel
primary_tasks: [trainer]
termination_delay: 30s
---
name: trainer
num_nodes: 2
run: echo train
---
name: buffer
run: sleep 1000
";

/// A pipeline of three steps: one node, two nodes, one node.
pub(super) const PIPELINE: &str = "\
name: p
---
name: prep
run: echo prep
---
name: train
num_nodes: 2
run: echo train
---
name: report
run: echo report
";

/// A group built as `skyc build --target aws` builds it, planned for run
/// `run`.
// [`PIPELINE`]'s steps: prep, train of two nodes, report.
pub(super) const PREP: usize = 0;
pub(super) const TRAIN: usize = 1;
pub(super) const REPORT: usize = 2;

/// A node of a step's first attempt ending, as the data plane would
/// report it.
pub(super) fn exited(task: usize, node: u32, code: i32) -> Event {
    Event::NodeExited {
        task,
        attempt: 0,
        node,
        phase: crate::policy::Phase::Run,
        code,
    }
}

pub(super) fn plan(yaml: &str, run: &str) -> Plan {
    let c = skyc_compiler::compile(
        "group.yaml",
        yaml.as_bytes(),
        &skyc_compiler::Options::default(),
    );
    let group = c
        .group
        .unwrap_or_else(|| panic!("invalid group: {:?}", c.diagnostics));
    let catalog = skyc_targets::cloud::Catalog::snapshot(skyc_targets::cloud::Cloud::Aws);
    let built = skyc_targets::cloud::build(&group, &catalog);
    let doc = built
        .document
        .unwrap_or_else(|| panic!("build failed: {:?}", built.diagnostics));
    Plan::from_spec(
        &doc,
        GroupSpec::from_ir(&group, Duration::from_secs(5)),
        run,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The engine, with the timers it asked for kept aside for the test to
/// fire.
pub(super) struct Driven {
    pub(super) engine: Engine,
    pub(super) timers: Vec<Timer>,
}

impl Driven {
    pub(super) fn start(plan: &Plan) -> Driven {
        let mut d = Driven {
            engine: Engine::new(plan.spec.clone()),
            timers: Vec::new(),
        };
        let actions = d.engine.start();
        d.keep(actions);
        d
    }

    pub(super) fn handle(&mut self, event: Event) {
        let actions = self.engine.handle(event);
        self.keep(actions);
    }

    fn keep(&mut self, actions: Vec<Action>) {
        for a in actions {
            if let Action::SetTimer { timer, .. } = a {
                self.timers.push(timer);
            }
        }
    }
}
