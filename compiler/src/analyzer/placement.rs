//! Placement: the tasks' infra pins against `inter_connection`, as SkyPilot
//! checks them before it places a group (`_validate_inter_connection_pins`
//! in `sky/optimizer.py`). In-group networking exists only on Kubernetes
//! and never across infrastructures, so `inter_connection: true` with a task
//! pinned elsewhere, or with pins that share no infrastructure, is an error;
//! unset, such pins turn networking off (a warning).
//!
//! A task's resource options are alternatives: it is pinned to a set of
//! clouds only when every option names a cloud, and to a set of
//! `cloud/region` infras (a Kubernetes context is a region) only when every
//! option also names a region. Pins conflict when the pinned tasks' sets
//! have no common element, at either granularity. Zones are not compared.

use super::resources::Location;
use crate::ir::InterConnection;
use crate::{Diagnostic, Diagnostics, Rule, Span};
use std::collections::BTreeSet;

/// One task of the group, with where its options may run.
pub(super) struct TaskLocations {
    pub name: String,
    pub locations: Vec<Location>,
}

/// The header's `inter_connection`, with the span of its key when written.
pub(super) struct Networking {
    pub setting: InterConnection,
    pub span: Option<Span>,
}

/// What one task pins, when it pins a cloud at all.
struct Pins<'a> {
    name: &'a str,
    /// Where the first option's pin is written.
    span: Span,
    clouds: BTreeSet<&'a str>,
    /// `None` when an option leaves the region open.
    infras: Option<BTreeSet<(&'a str, &'a str)>>,
}

impl<'a> Pins<'a> {
    fn of(task: &'a TaskLocations) -> Option<Self> {
        let first = task.locations.first()?;
        let mut clouds = BTreeSet::new();
        let mut infras = Some(BTreeSet::new());
        for location in &task.locations {
            let infra = location.infra.as_ref()?;
            let cloud = infra.cloud.as_deref()?;
            clouds.insert(cloud);
            match (&mut infras, infra.region.as_deref()) {
                (Some(set), Some(region)) => {
                    set.insert((cloud, region));
                }
                _ => infras = None,
            }
        }
        Some(Pins {
            name: &task.name,
            span: first.span,
            clouds,
            infras,
        })
    }
}

pub(super) fn check(networking: &Networking, tasks: &[TaskLocations], out: &mut Diagnostics) {
    if networking.setting == InterConnection::Disabled {
        return;
    }
    let pinned: Vec<Pins<'_>> = tasks.iter().filter_map(Pins::of).collect();
    let mut off_kubernetes = false;
    if networking.setting == InterConnection::Required {
        for task in pinned.iter().filter(|p| !p.clouds.contains("kubernetes")) {
            off_kubernetes = true;
            let clouds: Vec<String> = task.clouds.iter().map(|c| format!("`{c}`")).collect();
            out.push(
                required(
                    Diagnostic::new(
                        Rule::InterConnectionOffKubernetes,
                        task.span,
                        format!(
                            "`inter_connection: true` needs in-group networking, which SkyPilot \
                             has only on Kubernetes, but task `{}` is pinned to {}",
                            task.name,
                            clouds.join(" or ")
                        ),
                    )
                    .label("not Kubernetes"),
                    networking,
                )
                .help(
                    "remove the non-Kubernetes infra pins, or set `inter_connection: false` \
                     if the tasks do not need to reach each other by hostname",
                ),
            );
        }
    }
    // As SkyPilot: one problem at a time when networking is required.
    if off_kubernetes {
        return;
    }
    let Some(conflict) = conflict(&pinned) else {
        return;
    };
    let listing = conflict.listing();
    let d = if networking.setting == InterConnection::Required {
        required(
            Diagnostic::new(
                Rule::InterConnectionAcrossInfra,
                conflict.at.span,
                format!(
                    "the tasks are pinned to infrastructures with no common option ({listing}), \
                     but `inter_connection: true` needs in-group networking, which does not \
                     work across infrastructures"
                ),
            ),
            networking,
        )
        .help(
            "pin every task to one common infra, or set `inter_connection: false` if the \
             tasks do not need to reach each other by hostname",
        )
    } else {
        Diagnostic::new(
            Rule::NoCommonInfra,
            conflict.at.span,
            format!(
                "the tasks are pinned to infrastructures with no common option ({listing}), so \
                 SkyPilot sets up no in-group networking and the tasks cannot reach each other \
                 by hostname"
            ),
        )
        .help(
            "pin the tasks to one common infra, or set `inter_connection: false` to say \
             they need no hostnames",
        )
    };
    out.push(
        d.label(format!(
            "`{}` shares no {} with the tasks pinned before it",
            conflict.at.name, conflict.granularity
        ))
        .with_secondary(
            conflict.first.span,
            format!("`{}` pinned here", conflict.first.name),
        ),
    );
}

/// Points at the `inter_connection: true` that makes a pin an error.
fn required(d: Diagnostic, networking: &Networking) -> Diagnostic {
    match networking.span {
        Some(span) => d.with_secondary(span, "in-group networking required here"),
        None => d,
    }
}

/// Pins with no common element, at the granularity that conflicts.
struct Conflict<'p, 'a> {
    granularity: &'static str,
    /// Each task pinned at that granularity, with its pins as text.
    pins: Vec<(&'a str, Vec<String>)>,
    first: &'p Pins<'a>,
    /// The task after which nothing is common any more.
    at: &'p Pins<'a>,
}

impl Conflict<'_, '_> {
    /// `a: kubernetes/x; b: kubernetes/y`, for at most a few tasks.
    fn listing(&self) -> String {
        const SHOWN: usize = 6;
        let mut parts: Vec<String> = self
            .pins
            .iter()
            .take(SHOWN)
            .map(|(name, pins)| format!("{name}: {}", pins.join(", ")))
            .collect();
        if self.pins.len() > SHOWN {
            parts.push(format!("{} more", self.pins.len() - SHOWN));
        }
        parts.join("; ")
    }
}

/// SkyPilot's test: the `cloud/region` sets of the tasks pinned that far
/// have no common element, or else their cloud sets have none.
fn conflict<'p, 'a>(pinned: &'p [Pins<'a>]) -> Option<Conflict<'p, 'a>> {
    let by_infra: Vec<(&'p Pins<'a>, BTreeSet<(&'a str, &'a str)>)> = pinned
        .iter()
        .filter_map(|p| Some((p, p.infras.clone()?)))
        .collect();
    if let Some(at) = first_disjoint(&by_infra) {
        return Some(Conflict {
            granularity: "infrastructure",
            pins: by_infra
                .iter()
                .map(|(p, set)| (p.name, set.iter().map(|(c, r)| shown(c, r)).collect()))
                .collect(),
            first: by_infra[0].0,
            at,
        });
    }
    let by_cloud: Vec<(&'p Pins<'a>, BTreeSet<&'a str>)> =
        pinned.iter().map(|p| (p, p.clouds.clone())).collect();
    let at = first_disjoint(&by_cloud)?;
    Some(Conflict {
        granularity: "cloud",
        pins: by_cloud
            .iter()
            .map(|(p, set)| (p.name, set.iter().map(|c| (*c).to_owned()).collect()))
            .collect(),
        first: by_cloud[0].0,
        at,
    })
}

/// The first task at which the running intersection of the sets empties.
fn first_disjoint<'p, 'a, T: Ord + Copy>(
    sets: &[(&'p Pins<'a>, BTreeSet<T>)],
) -> Option<&'p Pins<'a>> {
    let (_, first) = sets.first()?;
    let mut common = first.clone();
    for (task, set) in &sets[1..] {
        common.retain(|x| set.contains(x));
        if common.is_empty() {
            return Some(task);
        }
    }
    None
}

/// A `cloud/region` pin as `infra` writes it (an SSH pool without the `ssh-`
/// its context name carries), sorted as SkyPilot lists them.
fn shown(cloud: &str, region: &str) -> String {
    let region = match cloud {
        "ssh" => region.strip_prefix("ssh-").unwrap_or(region),
        _ => region,
    };
    format!("{cloud}/{region}")
}
