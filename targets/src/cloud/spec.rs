//! The instance spec: one document per group (`kind: CloudInstances`).
//!
//! The intent first (group, whether its tasks run together or one after
//! another (`execution`: `parallel`, or `serial` for a pipeline), cloud,
//! region, the catalog the choice was made with, what the group costs per
//! hour here and in the other regions it could run in: every task's nodes,
//! so for a pipeline the sum of its steps, of which one runs at a time),
//! then per task what was chosen and what was considered,
//! then the group's requests, then one entry per node with its hostname
//! and the exact request that launches it. Key order is fixed, so the same
//! input gives the same bytes.

use super::boot::NODE_DIR;
use super::group::{Choice, Placement};
use super::request::number;
use super::select::{Offer, round_price};
use super::{Catalog, Considered, Outcome};
use serde_json::{Map, Value, json};
use skyc_compiler::ir::{Group, Role, Task};

pub const API_VERSION: &str = "skyc.dev/v1alpha1";
pub const KIND: &str = "CloudInstances";

fn role(task: &Task) -> &'static str {
    match task.role {
        Role::Primary => "primary",
        Role::Auxiliary => "auxiliary",
    }
}

fn accelerator(offer: &Offer) -> Value {
    offer
        .accelerator
        .as_ref()
        .map_or(Value::Null, |(n, c)| json!(format!("{n}:{}", number(*c))))
}

fn market(offer: &Offer) -> &'static str {
    if offer.use_spot { "spot" } else { "on-demand" }
}

/// A number as JSON: whole numbers without `.0`.
fn amount(x: Option<f64>) -> Value {
    match x {
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => json!(v as i64),
        Some(v) => json!(v),
        None => Value::Null,
    }
}

/// A task's entry: what runs, where, what it costs, what else was weighed.
pub(super) fn task(
    task: &Task,
    choice: &Choice,
    considered: &Considered,
    region: &str,
    placement: Option<&str>,
) -> Value {
    let offer = &choice.offer;
    let mut t = Map::new();
    t.insert("name".into(), json!(task.name));
    t.insert("role".into(), json!(role(task)));
    t.insert("num_nodes".into(), json!(task.num_nodes));
    if let Some(delay) = task.termination_delay_secs {
        t.insert("termination_delay_secs".into(), json!(delay));
    }
    t.insert(
        "recovery".into(),
        json!({
            "strategy": task.recovery.strategy,
            "max_restarts_on_errors": task.recovery.max_restarts_on_errors,
            "recover_on_exit_codes": task.recovery.recover_on_exit_codes,
        }),
    );
    t.insert("instance_type".into(), json!(offer.instance_type));
    t.insert("accelerator".into(), accelerator(offer));
    t.insert("vcpus".into(), amount(offer.vcpus));
    t.insert("memory_gb".into(), amount(offer.memory_gib));
    t.insert("market".into(), json!(market(offer)));
    t.insert("zone".into(), json!(offer.zone));
    if let Some(p) = placement {
        t.insert("placement".into(), json!(p));
    }
    t.insert("hourly_price_per_node".into(), json!(offer.price));
    t.insert(
        "hourly_price".into(),
        json!(round_price(offer.price * f64::from(task.num_nodes))),
    );
    let entries: Vec<Value> = considered
        .requests
        .iter()
        .zip(&considered.outcomes)
        .enumerate()
        .map(|(i, (req, outcome))| {
            let mut e = Map::new();
            e.insert("resources".into(), json!(req.describe()));
            match outcome {
                Outcome::Offers(offers) => {
                    let here = offers
                        .iter()
                        .filter(|o| o.region == region)
                        .min_by(|a, b| a.price.total_cmp(&b.price));
                    match here {
                        Some(o) => {
                            e.insert("instance_type".into(), json!(o.instance_type));
                            e.insert("hourly_price_per_node".into(), json!(o.price));
                            if i == choice.candidate {
                                e.insert("chosen".into(), json!(true));
                            }
                        }
                        None => {
                            let mut elsewhere: Vec<&str> =
                                offers.iter().map(|o| o.region.as_str()).collect();
                            elsewhere.dedup();
                            e.insert("instance_type".into(), json!(offers[0].instance_type));
                            e.insert(
                                "not_in_region".into(),
                                json!(format!("offered in {}", elsewhere.join(", "))),
                            );
                        }
                    }
                }
                Outcome::Infeasible(why) => {
                    e.insert("infeasible".into(), json!(why.reason));
                }
                Outcome::OtherCloud(cloud) => {
                    e.insert("skipped".into(), json!(format!("pinned to {cloud}")));
                }
                Outcome::NotTried => {
                    e.insert(
                        "skipped".into(),
                        json!("an earlier choice of the `ordered` list fits"),
                    );
                }
            }
            Value::Object(e)
        })
        .collect();
    t.insert("considered".into(), Value::Array(entries));
    Value::Object(t)
}

/// A node's entry: its hostname and the request that launches it.
pub(super) fn node(
    group: &Group,
    task: &Task,
    rank: u32,
    offer: &Offer,
    zone: Option<&str>,
    launch: Value,
) -> Value {
    json!({
        "hostname": format!("{}-{rank}.{}", task.name, group.name),
        "task": task.name,
        "rank": rank,
        "role": role(task),
        "instance_type": offer.instance_type,
        "zone": zone,
        "hourly_price": offer.price,
        "launch": launch,
    })
}

/// The group's document.
pub(super) fn document(
    group: &Group,
    catalog: &Catalog,
    placement: &Placement,
    tasks: Vec<Value>,
    requests: Vec<Value>,
    nodes: Vec<Value>,
) -> Value {
    let total = placement.regions.first().map_or(0.0, |(_, price)| *price);
    let regions: Vec<Value> = placement
        .regions
        .iter()
        .map(|(r, p)| json!({"region": r, "hourly_price": p}))
        .collect();
    let mut doc = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "group": group.name,
        "execution": group.execution,
        "cloud": catalog.cloud.name(),
        "region": placement.region,
        "inter_connection": group.inter_connection,
        "hourly_price": total,
        "catalog": {"source": catalog.origin.source, "date": catalog.origin.date},
        "regions": regions,
        "node_dir": NODE_DIR,
        "tasks": tasks,
        "requests": requests,
        "nodes": nodes,
    });
    // A pool file's spec is one worker's: `skyc pool apply` launches it
    // once per worker, and the workers hold after setup.
    if let Some(pool) = &group.pool {
        doc["pool"] = json!({ "workers": pool_size(&pool.workers) });
    }
    doc
}

/// A pool's size as its file gives it.
fn pool_size(workers: &skyc_compiler::ir::PoolWorkers) -> Value {
    match *workers {
        skyc_compiler::ir::PoolWorkers::Fixed { count } => json!(count),
        skyc_compiler::ir::PoolWorkers::Autoscaled {
            min_workers,
            max_workers,
            ..
        } => json!({"min": min_workers, "max": max_workers}),
    }
}
