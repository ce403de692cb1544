//! SkyPilot's instance selection for one resource candidate on one cloud
//! (`_get_feasible_launchable_resources` of `sky/clouds/{aws,gcp}.py` and
//! the catalog functions they call), as docs/targets/cloud.md states it:
//!
//! 1. an explicit `instance_type` is kept if the catalog has it (and it
//!    matches the accelerator, `cpus` and `memory` asked for);
//! 2. with no accelerator, the cheapest type (on-demand price) of the
//!    cloud's default CPU families that has `cpus` (default `8+` when
//!    neither `cpus` nor `memory` is given) and `memory` (default `4x`);
//! 3. with an accelerator, the cheapest type (in the market's price
//!    column) whose accelerator name matches case-insensitively and whose
//!    count matches within 0.01, filtered by `cpus`/`memory` when given.
//!    On GCP the accelerator is priced on its own and attached to a host:
//!    a fixed machine type for A100, L4, H100, ... or the cheapest N1 VM
//!    with the GPU's default vCPUs and 4 GiB per vCPU.
//!
//! Only that one type is then offered, in every region (and zone) that
//! prices it in the market's column, cheapest first: one offer per region
//! for AWS on-demand (which launches at region level), one per zone for
//! AWS spot and for GCP. An offer's price is per node and hour.
//!
//! SkyPilot sorts with pandas' unstable sort, so equal prices come out in
//! no defined order; skyc breaks ties by (vCPUs, memory, accelerator
//! count, type name) between types and by (region, zone) between places.

use super::Cloud;
use super::catalog::{Catalog, Row};
use super::families::{self, DEFAULT_MEMORY_PER_CPU, DEFAULT_VCPUS};
use super::request::{Bound, Request, number};
use std::cmp::Ordering;

/// One launchable choice: an instance type in a region (and zone).
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    pub instance_type: String,
    /// The GPUs the node has (AWS: the type's; GCP: attached or built in).
    pub accelerator: Option<(String, f64)>,
    /// GCP: whether the GPUs are attached (`guestAccelerators`) rather
    /// than part of the machine type.
    pub attached: bool,
    pub vcpus: Option<f64>,
    pub memory_gib: Option<f64>,
    pub arch: Option<String>,
    pub region: String,
    /// `None`: any zone of the region (AWS on-demand).
    pub zone: Option<String>,
    /// The zones of the region that offer it, cheapest first.
    pub zones: Vec<String>,
    pub use_spot: bool,
    /// $ per node and hour.
    pub price: f64,
}

/// Why nothing fits, with SkyPilot's "did you mean" candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Infeasible {
    pub reason: String,
    /// `NAME:COUNT` of similar accelerators, or similar names; sorted.
    pub did_you_mean: Vec<String>,
}

impl Infeasible {
    fn new(reason: impl Into<String>) -> Self {
        Infeasible {
            reason: reason.into(),
            did_you_mean: Vec::new(),
        }
    }
}

/// The offers of `req` on the catalog's cloud, in SkyPilot's order.
pub fn offers(catalog: &Catalog, req: &Request) -> Result<Vec<Offer>, Infeasible> {
    let place = Place::of(catalog, req)?;
    match catalog.cloud {
        Cloud::Aws => aws(catalog, req, &place),
        Cloud::Gcp => gcp(catalog, req, &place),
    }
}

/// A validated region/zone pin, in the catalog's spelling.
struct Place {
    region: Option<String>,
    zone: Option<String>,
}

impl Place {
    fn of(catalog: &Catalog, req: &Request) -> Result<Place, Infeasible> {
        let cloud = catalog.cloud.display();
        let mut region = None;
        if let Some(r) = &req.region {
            let Some(known) = catalog.region(r) else {
                let regions = catalog.regions();
                let close = close_matches(r, regions.iter().copied());
                let mut e = Infeasible::new(format!(
                    "{cloud} has no region `{r}` in the catalog (regions: {})",
                    regions.join(", ")
                ));
                e.did_you_mean = close;
                return Err(e);
            };
            region = Some(known.to_owned());
        }
        let mut zone = None;
        if let Some(z) = &req.zone {
            let rows = catalog.rows.iter().filter(|row| {
                region
                    .as_deref()
                    .is_none_or(|r| row.region.eq_ignore_ascii_case(r))
            });
            let mut zones: Vec<(&str, &str)> = rows
                .filter_map(|row| Some((row.zone.as_deref()?, row.region.as_str())))
                .collect();
            zones.sort_unstable();
            zones.dedup();
            let Some(&(known, in_region)) = zones.iter().find(|(k, _)| k.eq_ignore_ascii_case(z))
            else {
                let within = region
                    .as_deref()
                    .map_or(String::new(), |r| format!(" in region `{r}`"));
                let mut e =
                    Infeasible::new(format!("{cloud} has no zone `{z}`{within} in the catalog"));
                e.did_you_mean = close_matches(z, zones.iter().map(|(k, _)| *k));
                return Err(e);
            };
            zone = Some(known.to_owned());
            region = Some(in_region.to_owned());
        }
        Ok(Place { region, zone })
    }

    fn admits(&self, row: &Row) -> bool {
        self.region
            .as_deref()
            .is_none_or(|r| row.region.eq_ignore_ascii_case(r))
            && self.zone.as_deref().is_none_or(|z| {
                row.zone
                    .as_deref()
                    .is_some_and(|x| x.eq_ignore_ascii_case(z))
            })
    }

    /// ` in us-east-1`, or nothing.
    fn suffix(&self) -> String {
        match (&self.region, &self.zone) {
            (_, Some(z)) => format!(" in {z}"),
            (Some(r), None) => format!(" in {r}"),
            _ => String::new(),
        }
    }

    fn restrict(&self, regions: Vec<Region>) -> Vec<Region> {
        regions
            .into_iter()
            .filter(|r| self.region.as_deref().is_none_or(|x| r.name == x))
            .filter_map(|mut r| {
                if let Some(z) = &self.zone {
                    r.zones.retain(|x| x == z);
                }
                (!r.zones.is_empty()).then_some(r)
            })
            .collect()
    }
}

fn market(spot: bool) -> &'static str {
    if spot { "spot" } else { "on-demand" }
}

// ---------------------------------------------------------------- AWS

fn aws(catalog: &Catalog, req: &Request, place: &Place) -> Result<Vec<Offer>, Infeasible> {
    let instance_type = match (&req.instance_type, &req.accelerator) {
        (Some(t), _) => explicit(catalog, req, t)?,
        (None, Some((name, count))) => by_accelerator(catalog, req, place, name, *count)?,
        (None, None) => default_cpu(catalog, req, place, families::AWS_DEFAULT_FAMILIES, '.')?,
    };
    let rows: Vec<&Row> = catalog.of_type(&instance_type).collect();
    // Hack kept from SkyPilot: US regions are tried first.
    let regions = place.restrict(us_first(regions_offering(&rows, req.use_spot)));
    if regions.is_empty() {
        return Err(not_offered(&instance_type, req.use_spot, place));
    }
    let first = rows[0];
    let mut out = Vec::new();
    for region in regions {
        // A zone pinned by the task stays pinned (SkyPilot keeps it on the
        // resources it launches).
        let zonal = req.use_spot || place.zone.is_some();
        let places: Vec<Option<String>> = if zonal {
            region.zones.iter().cloned().map(Some).collect()
        } else {
            vec![None]
        };
        for zone in places {
            let price = cheapest_price(
                rows.iter()
                    .copied()
                    .filter(|r| r.region == region.name)
                    .filter(|r| zone.is_none() || r.zone == zone),
                req.use_spot,
            );
            let Some(price) = price else { continue };
            out.push(Offer {
                instance_type: instance_type.clone(),
                accelerator: first.accelerator.clone().zip(first.accelerator_count),
                attached: false,
                vcpus: first.vcpus,
                memory_gib: first.memory_gib,
                arch: first.arch.clone(),
                region: region.name.clone(),
                zones: zone
                    .clone()
                    .map_or_else(|| region.zones.clone(), |z| vec![z]),
                zone,
                use_spot: req.use_spot,
                price,
            });
        }
    }
    Ok(out)
}

/// An instance type given by name: it must exist, and match what else
/// the candidate asks for (SkyPilot checks this when it builds the
/// resources).
fn explicit(catalog: &Catalog, req: &Request, instance_type: &str) -> Result<String, Infeasible> {
    let cloud = catalog.cloud.display();
    let Some(row) = catalog.of_type(instance_type).next() else {
        return Err(Infeasible {
            reason: format!("{cloud} has no instance type `{instance_type}` in the catalog"),
            did_you_mean: close_matches(instance_type, catalog.instance_types()),
        });
    };
    if catalog.cloud == Cloud::Aws
        && let Some((name, count)) = &req.accelerator
    {
        let has = row
            .accelerator
            .as_deref()
            .zip(row.accelerator_count)
            .filter(|(n, c)| n.eq_ignore_ascii_case(name) && (c - count).abs() <= 0.01);
        if has.is_none() {
            let actual = row
                .accelerator
                .as_deref()
                .zip(row.accelerator_count)
                .map_or("no accelerator".to_owned(), |(n, c)| {
                    format!("{n}:{}", number(c))
                });
            return Err(Infeasible::new(format!(
                "`{instance_type}` has {actual}, not {name}:{}",
                number(*count)
            )));
        }
    }
    check_cpus_memory(req, row, instance_type)?;
    Ok(instance_type.to_owned())
}

fn check_cpus_memory(req: &Request, row: &Row, instance_type: &str) -> Result<(), Infeasible> {
    if let Some(c) = req.cpus
        && !c.admits(row.vcpus, None)
    {
        return Err(Infeasible::new(format!(
            "`{instance_type}` has {} vCPUs, not cpus={}",
            row.vcpus.map_or("unknown".to_owned(), number),
            c.text()
        )));
    }
    if let Some(m) = req.memory
        && !m.admits(row.memory_gib, row.vcpus)
    {
        return Err(Infeasible::new(format!(
            "`{instance_type}` has {} GiB of memory, not memory={}",
            row.memory_gib.map_or("unknown".to_owned(), number),
            m.text()
        )));
    }
    Ok(())
}

/// The cheapest type carrying the accelerator (AWS: the GPUs come with the
/// type).
fn by_accelerator(
    catalog: &Catalog,
    req: &Request,
    place: &Place,
    name: &str,
    count: f64,
) -> Result<String, Infeasible> {
    let matching = accelerator_rows(catalog, place, name, count)?;
    let fitting: Vec<&Row> = matching
        .into_iter()
        .filter(|r| r.instance_type.is_some())
        .filter(|r| req.cpus.is_none_or(|c| c.admits(r.vcpus, None)))
        .filter(|r| req.memory.is_none_or(|m| m.admits(r.memory_gib, r.vcpus)))
        .collect();
    let what = format!("{name}:{}", number(count));
    if fitting.is_empty() {
        return Err(Infeasible::new(format!(
            "no instance with {what}{} has {}",
            place.suffix(),
            cpus_memory_text(req)
        )));
    }
    if fitting.iter().all(|r| r.price_for(req.use_spot).is_none()) {
        return Err(Infeasible::new(format!(
            "no instance with {what}{} has a {} price",
            place.suffix(),
            market(req.use_spot)
        )));
    }
    cheapest_type(&fitting, req.use_spot).ok_or_else(|| Infeasible::new("no priced instance"))
}

/// Rows whose accelerator is `name:count` in the pinned place; when there
/// are none, SkyPilot's fuzzy list: accelerators whose name contains
/// `name` with at least `count` of them, as `NAME:COUNT`.
fn accelerator_rows<'a>(
    catalog: &'a Catalog,
    place: &Place,
    name: &str,
    count: f64,
) -> Result<Vec<&'a Row>, Infeasible> {
    let matching: Vec<&Row> = catalog
        .rows
        .iter()
        .filter(|r| place.admits(r))
        .filter(|r| {
            r.accelerator
                .as_deref()
                .is_some_and(|n| n.eq_ignore_ascii_case(name))
                && r.accelerator_count
                    .is_some_and(|c| (c - count).abs() <= 0.01)
        })
        .collect();
    if !matching.is_empty() {
        return Ok(matching);
    }
    let needle = name.to_ascii_lowercase();
    let mut similar: Vec<String> = catalog
        .rows
        .iter()
        .filter(|r| place.admits(r))
        .filter_map(|r| {
            let n = r.accelerator.as_deref()?;
            let c = r.accelerator_count?;
            (n.to_ascii_lowercase().contains(&needle) && c >= count)
                .then(|| format!("{n}:{}", count_text(c)))
        })
        .collect();
    similar.sort();
    similar.dedup();
    Err(Infeasible {
        reason: format!(
            "the {} catalog has no {name}:{}{}",
            catalog.cloud.display(),
            number(count),
            place.suffix()
        ),
        did_you_mean: similar,
    })
}

/// SkyPilot's display of a fuzzy candidate's count: whole, or 2 decimals.
fn count_text(c: f64) -> String {
    if c.fract() == 0.0 {
        number(c)
    } else {
        format!("{c:.2}")
    }
}

/// The cheapest type (on-demand price, as SkyPilot sorts even for spot)
/// of the default CPU families with the asked (or default) cpus/memory.
fn default_cpu(
    catalog: &Catalog,
    req: &Request,
    place: &Place,
    families: &[&str],
    separator: char,
) -> Result<String, Infeasible> {
    let (cpus, memory) = default_cpus_memory(req);
    let prefixes: Vec<String> = families.iter().map(|f| format!("{f}{separator}")).collect();
    let fitting: Vec<&Row> = catalog
        .rows
        .iter()
        .filter(|r| {
            r.instance_type
                .as_deref()
                .is_some_and(|t| prefixes.iter().any(|p| t.starts_with(p.as_str())))
        })
        .filter(|r| place.admits(r))
        .filter(|r| cpus.is_none_or(|c| c.admits(r.vcpus, None)))
        .filter(|r| memory.admits(r.memory_gib, r.vcpus))
        .collect();
    cheapest_type(&fitting, false).ok_or_else(|| {
        let shown = Request {
            cpus,
            memory: Some(memory),
            ..Request::default()
        };
        Infeasible::new(format!(
            "no instance of the default CPU families ({}){} has {}",
            families.join(", "),
            place.suffix(),
            cpus_memory_text(&shown)
        ))
    })
}

/// SkyPilot's defaults for a CPU instance: `cpus: 8+` when neither `cpus`
/// nor `memory` is given, `memory: 4x` when `memory` is not.
pub fn default_cpus_memory(req: &Request) -> (Option<Bound>, Bound) {
    let cpus = match (req.cpus, req.memory) {
        (None, None) => Some(Bound::AtLeast(DEFAULT_VCPUS)),
        (c, _) => c,
    };
    let memory = req.memory.unwrap_or(Bound::PerCpu(DEFAULT_MEMORY_PER_CPU));
    (cpus, memory)
}

fn cpus_memory_text(req: &Request) -> String {
    let mut parts = Vec::new();
    if let Some(c) = req.cpus {
        parts.push(format!("cpus={}", c.text()));
    }
    if let Some(m) = req.memory {
        parts.push(format!("memory={}", m.text()));
    }
    if parts.is_empty() {
        "a price".to_owned()
    } else {
        parts.join(" and ")
    }
}

fn not_offered(instance_type: &str, spot: bool, place: &Place) -> Infeasible {
    Infeasible::new(format!(
        "`{instance_type}` has no {} price{} in the catalog",
        market(spot),
        if place.region.is_some() || place.zone.is_some() {
            place.suffix()
        } else {
            " anywhere".to_owned()
        }
    ))
}

// ---------------------------------------------------------------- GCP

fn gcp(catalog: &Catalog, req: &Request, place: &Place) -> Result<Vec<Offer>, Infeasible> {
    // (host type, GPUs and whether they attach to the host)
    let (host, gpus): (String, Option<(String, f64, bool)>) =
        match (&req.instance_type, &req.accelerator) {
            (Some(t), acc) => {
                let host = explicit(catalog, req, t)?;
                let gpus = match acc {
                    Some((name, count)) => {
                        let canonical = gcp_canonical(catalog, name, *count, place)?;
                        gcp_check_attachable(catalog, t, &canonical, *count)?;
                        let attached = !families::gcp_has_fixed_hosts(&canonical);
                        Some((canonical, *count, attached))
                    }
                    None => families::gcp_gpus_of_host(t)
                        .map(|(n, c)| (n.to_owned(), f64::from(c), false)),
                };
                (host, gpus)
            }
            (None, Some((name, count))) => {
                let canonical = gcp_canonical(catalog, name, *count, place)?;
                let host = gcp_host(catalog, req, &canonical, *count)?;
                let attached = !families::gcp_has_fixed_hosts(&canonical);
                (host, Some((canonical, *count, attached)))
            }
            (None, None) => (
                default_cpu(catalog, req, place, families::GCP_DEFAULT_FAMILIES, '-')?,
                None,
            ),
        };
    let host_rows: Vec<&Row> = catalog.of_type(&host).collect();
    let host_regions = regions_offering(&host_rows, req.use_spot);
    let gpu_rows: Vec<&Row> = match &gpus {
        Some((name, count, _)) => catalog
            .rows
            .iter()
            .filter(|r| r.instance_type.is_none())
            .filter(|r| {
                r.accelerator.as_deref() == Some(name.as_str())
                    && r.accelerator_count == Some(*count)
            })
            .collect(),
        None => Vec::new(),
    };
    let regions = match &gpus {
        None => host_regions,
        // Where both the GPUs and the host are offered, in the GPUs' order.
        Some(_) => regions_offering(&gpu_rows, req.use_spot)
            .into_iter()
            .filter_map(|mut r| {
                let host = host_regions.iter().find(|h| h.name == r.name)?;
                r.zones.retain(|z| host.zones.contains(z));
                (!r.zones.is_empty()).then_some(r)
            })
            .collect(),
    };
    let regions = place.restrict(regions);
    if regions.is_empty() {
        let what = match &gpus {
            Some((n, c, _)) => format!("`{host}` with {n}:{}", number(*c)),
            None => format!("`{host}`"),
        };
        return Err(Infeasible::new(format!(
            "{what} has no {} price{} in the catalog",
            market(req.use_spot),
            if place.region.is_some() || place.zone.is_some() {
                place.suffix()
            } else {
                " anywhere".to_owned()
            }
        )));
    }
    let first = host_rows[0];
    let mut out = Vec::new();
    for region in regions {
        for zone in &region.zones {
            let in_zone = |r: &&Row| r.region == region.name && r.zone.as_deref() == Some(zone);
            let Some(host_price) =
                cheapest_price(host_rows.iter().copied().filter(in_zone), req.use_spot)
            else {
                continue;
            };
            let gpu_price = if gpus.is_some() {
                let zone_rows: Vec<&Row> = gpu_rows.iter().copied().filter(in_zone).collect();
                // GCP's accelerator price: the spot one when asked and
                // known, else the on-demand one.
                let spot = req
                    .use_spot
                    .then(|| cheapest_price(zone_rows.iter().copied(), true))
                    .flatten();
                match spot.or_else(|| cheapest_price(zone_rows.iter().copied(), false)) {
                    Some(p) => p,
                    None => continue,
                }
            } else {
                0.0
            };
            out.push(Offer {
                instance_type: host.clone(),
                accelerator: gpus.as_ref().map(|(n, c, _)| (n.clone(), *c)),
                attached: gpus.as_ref().is_some_and(|g| g.2),
                vcpus: first.vcpus,
                memory_gib: first.memory_gib,
                arch: None,
                region: region.name.clone(),
                zone: Some(zone.clone()),
                zones: vec![zone.clone()],
                use_spot: req.use_spot,
                price: round_price(host_price + gpu_price),
            });
        }
    }
    Ok(out)
}

/// The catalog's spelling of an accelerator asked for, or the fuzzy list.
fn gcp_canonical(
    catalog: &Catalog,
    name: &str,
    count: f64,
    place: &Place,
) -> Result<String, Infeasible> {
    let rows = accelerator_rows(catalog, place, name, count)?;
    let canonical = rows
        .first()
        .and_then(|r| r.accelerator.clone())
        .unwrap_or_else(|| name.to_owned());
    // SkyPilot runs TPUs as TPU VMs (another API), not on a host VM.
    if canonical.to_ascii_lowercase().starts_with("tpu-") {
        return Err(Infeasible::new(format!(
            "{canonical} is a TPU: TPU VMs are not created by skyc's GCP target"
        )));
    }
    Ok(canonical)
}

/// GCP's host VM for `count` GPUs `name` (canonical spelling).
fn gcp_host(
    catalog: &Catalog,
    req: &Request,
    name: &str,
    count: f64,
) -> Result<String, Infeasible> {
    let what = format!("{name}:{}", number(count));
    let hosts: Vec<&Row> = if families::gcp_has_fixed_hosts(name) {
        let Some(types) = families::gcp_fixed_hosts(name, count) else {
            return Err(Infeasible::new(format!(
                "GCP has no machine type with {what}"
            )));
        };
        catalog
            .rows
            .iter()
            .filter(|r| {
                r.instance_type
                    .as_deref()
                    .is_some_and(|t| types.contains(&t))
            })
            .filter(|r| req.cpus.is_none_or(|c| c.admits(r.vcpus, None)))
            .filter(|r| req.memory.is_none_or(|m| m.admits(r.memory_gib, r.vcpus)))
            .collect()
    } else {
        let mut cpus = req.cpus;
        if req.cpus.is_none() && req.memory.is_none() {
            let Some(default) = families::gcp_default_host_cpus(name, count) else {
                return Err(Infeasible::new(format!(
                    "GCP has no default host VM for {what}; give `cpus` or an `instance_type`"
                )));
            };
            cpus = Some(Bound::AtLeast(default));
        }
        let memory = req.memory.or_else(|| {
            cpus.map(|c| {
                let v = match c {
                    Bound::Exactly(v) | Bound::AtLeast(v) | Bound::PerCpu(v) => v,
                };
                Bound::AtLeast(v.trunc() * families::GCP_GPU_HOST_MEMORY_PER_CPU)
            })
        });
        catalog
            .rows
            .iter()
            .filter(|r| {
                r.instance_type
                    .as_deref()
                    .is_some_and(|t| families::GCP_N1_HOSTS.iter().any(|p| t.starts_with(p)))
            })
            .filter(|r| cpus.is_none_or(|c| c.admits(r.vcpus, None)))
            .filter(|r| memory.is_none_or(|m| m.admits(r.memory_gib, r.vcpus)))
            .collect()
    };
    cheapest_type(&hosts, false).ok_or_else(|| {
        Infeasible::new(format!(
            "no host VM for {what} in the catalog has {}",
            cpus_memory_text(req)
        ))
    })
}

/// SkyPilot's `check_accelerator_attachable_to_host` for an explicit type.
fn gcp_check_attachable(
    catalog: &Catalog,
    instance_type: &str,
    name: &str,
    count: f64,
) -> Result<(), Infeasible> {
    let what = format!("{name}:{}", number(count));
    if let Some(types) = families::gcp_fixed_hosts(name, count) {
        if !types.contains(&instance_type) {
            return Err(Infeasible::new(format!(
                "{name} GPUs cannot be attached to `{instance_type}`; use one of {}",
                types.join(", ")
            )));
        }
        return Ok(());
    }
    if families::gcp_has_fixed_hosts(name) {
        return Err(Infeasible::new(format!(
            "GCP has no machine type with {what}"
        )));
    }
    if !instance_type.starts_with("n1-") {
        return Err(Infeasible::new(format!(
            "{name} GPUs cannot be attached to `{instance_type}`; use an N1 instance type"
        )));
    }
    let Some(limits) = families::gcp_attachable_limits(name) else {
        return Ok(());
    };
    let Some(&(_, max_cpus, max_memory)) = limits.iter().find(|(c, _, _)| f64::from(*c) == count)
    else {
        let counts: Vec<String> = limits.iter().map(|(c, _, _)| c.to_string()).collect();
        return Err(Infeasible::new(format!(
            "{what} is not launchable on GCP; the valid {name} counts are {}",
            counts.join(", ")
        )));
    };
    let Some(row) = catalog.of_type(instance_type).next() else {
        return Ok(());
    };
    if row.vcpus.is_some_and(|v| v > max_cpus) || row.memory_gib.is_some_and(|m| m > max_memory) {
        return Err(Infeasible::new(format!(
            "{what} cannot be attached to `{instance_type}`: at most {} vCPUs and {} GB of memory",
            number(max_cpus),
            number(max_memory)
        )));
    }
    Ok(())
}

// ---------------------------------------------------------- shared rules

/// A region and its zones, as SkyPilot's `get_region_zones` lists them.
#[derive(Clone, Debug, PartialEq)]
struct Region {
    name: String,
    zones: Vec<String>,
}

/// Regions (and zones) where `rows` have a price in the market's column,
/// ordered by (price, region, zone); zones of a region in that order.
fn regions_offering(rows: &[&Row], spot: bool) -> Vec<Region> {
    let mut priced: Vec<(f64, &str, &str)> = rows
        .iter()
        .filter_map(|r| Some((r.price_for(spot)?, r.region.as_str(), r.zone.as_deref()?)))
        .collect();
    priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)).then(a.2.cmp(b.2)));
    let mut out: Vec<Region> = Vec::new();
    for (_, region, zone) in priced {
        match out.iter_mut().find(|r| r.name == region) {
            Some(r) => {
                if !r.zones.iter().any(|z| z == zone) {
                    r.zones.push(zone.to_owned());
                }
            }
            None => out.push(Region {
                name: region.to_owned(),
                zones: vec![zone.to_owned()],
            }),
        }
    }
    out
}

fn us_first(regions: Vec<Region>) -> Vec<Region> {
    let (mut us, other): (Vec<Region>, Vec<Region>) =
        regions.into_iter().partition(|r| r.name.starts_with("us-"));
    us.extend(other);
    us
}

/// The lowest price of `rows` in the market's column.
fn cheapest_price<'a>(rows: impl Iterator<Item = &'a Row>, spot: bool) -> Option<f64> {
    rows.filter_map(|r| r.price_for(spot))
        .min_by(f64::total_cmp)
}

/// The type of the cheapest row (an unpriced row sorts last, as NaN does),
/// ties broken by (vCPUs, memory, accelerator count, name).
fn cheapest_type(rows: &[&Row], spot: bool) -> Option<String> {
    rows.iter()
        .filter(|r| r.instance_type.is_some())
        .min_by(|a, b| {
            none_last(a.price_for(spot), b.price_for(spot))
                .then(none_last(a.vcpus, b.vcpus))
                .then(none_last(a.memory_gib, b.memory_gib))
                .then(none_last(a.accelerator_count, b.accelerator_count))
                .then(a.instance_type.cmp(&b.instance_type))
        })
        .and_then(|r| r.instance_type.clone())
}

fn none_last(a: Option<f64>, b: Option<f64>) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Sums of catalog floats, rounded to the catalog's own precision so the
/// spec shows `3.74406`, not `3.7440600000000002`.
pub fn round_price(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Names close to `word` (one edit per ten characters, at least one; an
/// edit is an insert, a delete, a replacement or a swap of neighbours),
/// sorted: SkyPilot's `difflib.get_close_matches(cutoff=0.9)` spirit for
/// regions, zones and types.
fn close_matches<'a>(word: &str, names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let w = word.to_ascii_lowercase();
    let mut out: Vec<String> = names
        .into_iter()
        .filter(|n| {
            let n = n.to_ascii_lowercase();
            let (a, b) = (n.chars().count(), w.chars().count());
            let longest = a.max(b);
            // The distance is at least the difference in length: skip what
            // cannot be close (and a hostile megabyte name) before counting.
            let allowed = (longest / 10).max(1);
            longest > 0 && a.abs_diff(b) <= allowed && strsim::osa_distance(&w, &n) <= allowed
        })
        .map(str::to_owned)
        .collect();
    out.sort();
    out.dedup();
    out.truncate(5);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_matches_are_typos_only() {
        let names = ["us-east-1", "us-east-2", "us-west-2", "europe-west4"];
        assert_eq!(
            close_matches("us-eats-1", names),
            vec!["us-east-1".to_owned()]
        );
        assert!(close_matches("mars-1", names).is_empty());
        // Edits are inserts, deletes, replacements and swaps of two
        // neighbours (optimal string alignment).
        assert_eq!(strsim::osa_distance("kitten", "sitting"), 3);
        assert_eq!(strsim::osa_distance("eats", "east"), 1);
    }

    #[test]
    fn tpus_are_refused_on_gcp() {
        let text = "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice\n\
                    n1-standard-8,8.0,30.0,,,,us-central1,us-central1-a,0.38,0.08\n\
                    ,,,tpu-v5p-8,1,,us-central1,us-central1-a,4.2,2.1\n";
        let catalog = Catalog::parse(
            Cloud::Gcp,
            text,
            super::super::Origin {
                source: "t".into(),
                date: None,
            },
        )
        .unwrap();
        let req = Request {
            accelerator: Some(("TPU-V5P-8".into(), 1.0)),
            ..Request::default()
        };
        let e = offers(&catalog, &req).unwrap_err();
        assert!(e.reason.contains("tpu-v5p-8 is a TPU"), "{}", e.reason);
    }

    #[test]
    fn rounding() {
        assert_eq!(round_price(0.81406 + 2.93), 3.74406);
    }
}
