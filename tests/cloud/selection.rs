//! SkyPilot's selection rule, pinned case by case against the snapshot
//! catalog (`targets/catalog/v8`). Every expected value below was worked
//! out from the CSV rows by SkyPilot's rule as docs/targets/cloud.md
//! states it (and as `sky/catalog/common.py` implements it), not read
//! back from skyc. A property test then drives random requests and groups
//! through the same code and checks what must hold for any input.

use super::{CLOUDS, build, spec};
use crate::support::render_human;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use skyc_targets::cloud::request::{Bound, Request};
use skyc_targets::cloud::select::{self, Infeasible, Offer};
use skyc_targets::cloud::{Catalog, Cloud};

fn catalog(cloud: Cloud) -> &'static Catalog {
    static AWS: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    static GCP: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    match cloud {
        Cloud::Aws => AWS.get_or_init(|| Catalog::snapshot(Cloud::Aws)),
        Cloud::Gcp => GCP.get_or_init(|| Catalog::snapshot(Cloud::Gcp)),
    }
}

fn offers(cloud: Cloud, req: &Request) -> Vec<Offer> {
    select::offers(catalog(cloud), req).unwrap_or_else(|e| panic!("{req:?}: {e:?}"))
}

fn infeasible(cloud: Cloud, req: &Request) -> Infeasible {
    match select::offers(catalog(cloud), req) {
        Ok(o) => panic!("{req:?} is feasible: {o:?}"),
        Err(e) => e,
    }
}

/// (type, region, zone, price) of each offer, in SkyPilot's order.
fn summary(offers: &[Offer]) -> Vec<(&str, &str, Option<&str>, f64)> {
    offers
        .iter()
        .map(|o| {
            (
                o.instance_type.as_str(),
                o.region.as_str(),
                o.zone.as_deref(),
                o.price,
            )
        })
        .collect()
}

fn gpu(name: &str, count: f64) -> Request {
    Request {
        accelerator: Some((name.to_owned(), count)),
        ..Request::default()
    }
}

// ------------------------------------------------------------- AWS

#[test]
fn default_cpu_instance_is_8_plus_vcpus_with_4_gib_each() {
    // Among m6i/m6id/c6i (the default families in the slices), 8+ vCPUs
    // and 4 GiB per vCPU: m6i.2xlarge (c6i.2xlarge has 2 GiB per vCPU).
    assert_eq!(
        summary(&offers(Cloud::Aws, &Request::default())),
        vec![("m6i.2xlarge", "us-west-2", None, 0.384)]
    );
    // Spot: the type is still chosen by its on-demand price, then offered
    // per zone at spot prices, cheapest first.
    let spot = Request {
        use_spot: true,
        ..Request::default()
    };
    assert_eq!(
        summary(&offers(Cloud::Aws, &spot)),
        vec![
            ("m6i.2xlarge", "us-west-2", Some("usw2-az3"), 0.1499),
            ("m6i.2xlarge", "us-west-2", Some("usw2-az1"), 0.1533),
            ("m6i.2xlarge", "us-west-2", Some("usw2-az4"), 0.1569),
            ("m6i.2xlarge", "us-west-2", Some("usw2-az2"), 0.1651),
        ]
    );
}

#[test]
fn cpus_and_memory_exact_minimum_and_per_cpu() {
    let four = Request {
        cpus: Some(Bound::Exactly(4.0)),
        ..Request::default()
    };
    // On-demand: one offer per region (ties by region name).
    assert_eq!(
        summary(&offers(Cloud::Aws, &four)),
        vec![
            ("m6id.xlarge", "us-east-1", None, 0.2373),
            ("m6id.xlarge", "us-east-2", None, 0.2373),
            ("m6id.xlarge", "us-west-2", None, 0.2373),
        ]
    );
    // memory alone: the 8+ vCPU default does not apply.
    let mem = Request {
        memory: Some(Bound::AtLeast(16.0)),
        ..Request::default()
    };
    assert_eq!(offers(Cloud::Aws, &mem)[0].instance_type, "m6id.xlarge");
    // 2 GiB per vCPU admits the cheaper compute-optimised type.
    let ratio = Request {
        cpus: Some(Bound::AtLeast(8.0)),
        memory: Some(Bound::PerCpu(2.0)),
        ..Request::default()
    };
    assert_eq!(offers(Cloud::Aws, &ratio)[0].instance_type, "c6i.2xlarge");
    let none = Request {
        cpus: Some(Bound::AtLeast(8.0)),
        memory: Some(Bound::PerCpu(8.0)),
        ..Request::default()
    };
    assert!(
        infeasible(Cloud::Aws, &none)
            .reason
            .contains("default CPU families")
    );
}

#[test]
fn accelerators_match_by_name_case_insensitively_and_by_count() {
    // p4d.24xlarge's on-demand price is 21.95764 in us-east-2 and
    // us-west-2 but 21.957642 in us-east-1: regions go by price.
    let expected = vec![
        ("p4d.24xlarge", "us-east-2", None, 21.95764),
        ("p4d.24xlarge", "us-west-2", None, 21.95764),
        ("p4d.24xlarge", "us-east-1", None, 21.957642),
    ];
    assert_eq!(summary(&offers(Cloud::Aws, &gpu("A100", 8.0))), expected);
    assert_eq!(summary(&offers(Cloud::Aws, &gpu("a100", 8.0))), expected);
    // A100-80GB is its own name (GpuInfo says A100; the name column rules).
    assert_eq!(
        offers(Cloud::Aws, &gpu("A100-80GB", 8.0))[0].instance_type,
        "p4de.24xlarge"
    );
    let t4 = offers(Cloud::Aws, &gpu("T4", 1.0));
    assert_eq!(t4[0].instance_type, "g4dn.xlarge");
    assert_eq!(t4[0].accelerator, Some(("T4".to_owned(), 1.0)));
}

#[test]
fn spot_uses_the_spot_column_and_zones() {
    let mut h100 = gpu("H100", 8.0);
    h100.use_spot = true;
    let o = offers(Cloud::Aws, &h100);
    assert_eq!(o.len(), 13, "one offer per zone with a spot price");
    assert_eq!(
        summary(&o[..3]),
        vec![
            ("p5.48xlarge", "us-east-1", Some("use1-az5"), 14.246),
            ("p5.48xlarge", "us-east-1", Some("use1-az3"), 14.582),
            ("p5.48xlarge", "us-east-1", Some("use1-az6"), 14.8686),
        ]
    );
    // p5.4xlarge (H100:1) has no spot price in any zone.
    let mut one = gpu("H100", 1.0);
    one.use_spot = true;
    assert_eq!(
        infeasible(Cloud::Aws, &one).reason,
        "no instance with H100:1 has a spot price"
    );
    one.use_spot = false;
    assert_eq!(offers(Cloud::Aws, &one)[0].instance_type, "p5.4xlarge");
}

#[test]
fn unknown_accelerators_get_skypilots_did_you_mean() {
    let e = infeasible(Cloud::Aws, &gpu("H100", 3.0));
    assert_eq!(e.reason, "the AWS catalog has no H100:3");
    assert_eq!(e.did_you_mean, vec!["H100:8"]);
    // Names containing `A10` with at least one of them, sorted.
    let e = infeasible(Cloud::Aws, &gpu("A10", 1.0));
    assert_eq!(
        e.did_you_mean,
        vec!["A100-80GB:8", "A100:8", "A10G:1", "A10G:4", "A10G:8"]
    );
    assert!(
        infeasible(Cloud::Aws, &gpu("TPU-V5", 1.0))
            .did_you_mean
            .is_empty()
    );
}

#[test]
fn an_explicit_instance_type_is_checked_against_the_rest() {
    let typed = |t: &str| Request {
        instance_type: Some(t.to_owned()),
        ..Request::default()
    };
    let o = offers(Cloud::Aws, &typed("m6i.4xlarge"));
    assert!(o.iter().all(|o| o.instance_type == "m6i.4xlarge"));
    assert_eq!(o.len(), 3);
    let mut wrong = typed("m6i.4xlarge");
    wrong.accelerator = Some(("A100".into(), 1.0));
    assert_eq!(
        infeasible(Cloud::Aws, &wrong).reason,
        "`m6i.4xlarge` has no accelerator, not A100:1"
    );
    let mut right = typed("p4d.24xlarge");
    right.accelerator = Some(("a100".into(), 8.0));
    assert_eq!(offers(Cloud::Aws, &right).len(), 3);
    let mut small = typed("m6i.4xlarge");
    small.cpus = Some(Bound::Exactly(8.0));
    assert_eq!(
        infeasible(Cloud::Aws, &small).reason,
        "`m6i.4xlarge` has 16 vCPUs, not cpus=8"
    );
    let e = infeasible(Cloud::Aws, &typed("m6i.4xlarg"));
    assert_eq!(e.did_you_mean, vec!["m6i.4xlarge"]);
}

#[test]
fn infra_pins_a_region_or_zone() {
    let mut a100 = gpu("A100", 8.0);
    a100.region = Some("us-east-1".into());
    assert_eq!(
        summary(&offers(Cloud::Aws, &a100)),
        vec![("p4d.24xlarge", "us-east-1", None, 21.957642)]
    );
    // p4de is not in us-east-2: the fuzzy list is filtered by region too.
    let mut p4de = gpu("A100-80GB", 8.0);
    p4de.region = Some("us-east-2".into());
    let e = infeasible(Cloud::Aws, &p4de);
    assert_eq!(e.reason, "the AWS catalog has no A100-80GB:8 in us-east-2");
    assert!(e.did_you_mean.is_empty());
    // A zone stays pinned, on-demand too.
    let mut t4 = gpu("T4", 1.0);
    t4.zone = Some("use1-az6".into());
    assert_eq!(
        summary(&offers(Cloud::Aws, &t4)),
        vec![("g4dn.xlarge", "us-east-1", Some("use1-az6"), 0.526)]
    );
    let typo = Request {
        region: Some("us-eats-1".into()),
        ..Request::default()
    };
    let e = infeasible(Cloud::Aws, &typo);
    assert!(
        e.reason
            .starts_with("AWS has no region `us-eats-1` in the catalog")
    );
    assert_eq!(e.did_you_mean, vec!["us-east-1"]);
}

// ------------------------------------------------------------- GCP

#[test]
fn gcp_default_cpu_and_fixed_gpu_hosts() {
    // Of the default families the slices hold n2-standard-2 and -16 and
    // n4-standard-4 and -48; 8+ vCPUs at 4 GiB each leaves -16 and -48.
    let o = offers(Cloud::Gcp, &Request::default());
    assert_eq!(
        summary(&o[..1]),
        vec![(
            "n2-standard-16",
            "us-central1",
            Some("us-central1-a"),
            0.77694
        )]
    );
    assert_eq!(o.len(), 10, "one offer per zone");
    // A100:1 comes with a2-highgpu-1g; the price is the VM's plus the
    // GPU's, regions in the GPU's price order.
    let a100 = offers(Cloud::Gcp, &gpu("A100", 1.0));
    assert_eq!(
        summary(&a100[..1]),
        vec![(
            "a2-highgpu-1g",
            "europe-west4",
            Some("europe-west4-a"),
            2.42771
        )]
    );
    assert!(!a100[0].attached);
    // L4:1 has five possible hosts; the cheapest in the slices is g2-standard-8.
    assert_eq!(
        summary(&offers(Cloud::Gcp, &gpu("L4", 1.0))[..1]),
        vec![("g2-standard-8", "us-east4", Some("us-east4-a"), 0.85083)]
    );
    let mut h100 = gpu("H100", 8.0);
    h100.use_spot = true;
    assert_eq!(
        summary(&offers(Cloud::Gcp, &h100)[..1]),
        vec![("a3-highgpu-8g", "us-east4", Some("us-east4-a"), 19.0893)]
    );
}

#[test]
fn gcp_attachable_gpus_take_the_cheapest_n1_host() {
    // T4:1: a host with 4+ vCPUs and 16+ GiB; n1-highmem-8 in the slices.
    let t4 = offers(Cloud::Gcp, &gpu("T4", 1.0));
    assert_eq!(
        summary(&t4[..1]),
        vec![(
            "n1-highmem-8",
            "us-central1",
            Some("us-central1-a"),
            0.82321
        )]
    );
    assert!(t4[0].attached);
    let mut typed = gpu("T4", 1.0);
    typed.instance_type = Some("n1-highmem-8".into());
    assert_eq!(summary(&offers(Cloud::Gcp, &typed)), summary(&t4));
    typed.instance_type = Some("n4-standard-4".into());
    assert_eq!(
        infeasible(Cloud::Gcp, &typed).reason,
        "T4 GPUs cannot be attached to `n4-standard-4`; use an N1 instance type"
    );
    typed.instance_type = Some("a2-highgpu-2g".into());
    typed.accelerator = Some(("A100".into(), 1.0));
    assert_eq!(
        infeasible(Cloud::Gcp, &typed).reason,
        "A100 GPUs cannot be attached to `a2-highgpu-2g`; use one of a2-highgpu-1g"
    );
    // A machine type with built-in GPUs is priced with them.
    let a2 = Request {
        instance_type: Some("a2-highgpu-1g".into()),
        ..Request::default()
    };
    let o = offers(Cloud::Gcp, &a2);
    assert_eq!(o[0].accelerator, Some(("A100".to_owned(), 1.0)));
    assert_eq!(o[0].price, 2.42771);
    let e = infeasible(Cloud::Gcp, &gpu("T4", 8.0));
    assert_eq!(e.reason, "the GCP catalog has no T4:8");
}

// ------------------------------------------------- candidates and groups

fn one_task(resources: &str) -> String {
    format!("name: g\nexecution: parallel\n---\nname: t\nresources:\n{resources}run: echo\n")
}

#[test]
fn any_of_takes_the_cheapest_and_ordered_the_first_that_fits() {
    let any = spec(
        &one_task("  any_of:\n    - {accelerators: H100:8}\n    - {accelerators: A100:8}\n"),
        Cloud::Aws,
    );
    assert_eq!(any["tasks"][0]["instance_type"], "p4d.24xlarge");
    assert_eq!(any["region"], "us-east-2");
    let considered = any["tasks"][0]["considered"].as_array().unwrap();
    assert_eq!(considered[0]["instance_type"], "p5.48xlarge");
    assert_eq!(considered[1]["chosen"], true);

    let ordered = spec(
        &one_task("  ordered:\n    - {accelerators: H100:8}\n    - {accelerators: A100:8}\n"),
        Cloud::Aws,
    );
    assert_eq!(ordered["tasks"][0]["instance_type"], "p5.48xlarge");
    let considered = ordered["tasks"][0]["considered"].as_array().unwrap();
    assert_eq!(
        considered[1]["skipped"],
        "an earlier choice of the `ordered` list fits"
    );

    // The first that fits: H100:3 does not.
    let ordered = spec(
        &one_task("  ordered:\n    - {accelerators: H100:3}\n    - {accelerators: A100:8}\n"),
        Cloud::Aws,
    );
    assert_eq!(ordered["tasks"][0]["instance_type"], "p4d.24xlarge");
    assert_eq!(
        ordered["tasks"][0]["considered"][0]["infeasible"],
        "the AWS catalog has no H100:3"
    );
    // A list of accelerators is ordered too.
    let list = spec(&one_task("  accelerators: [H100:8, A100:8]\n"), Cloud::Aws);
    assert_eq!(list["tasks"][0]["instance_type"], "p5.48xlarge");
}

#[test]
fn the_group_runs_in_the_region_cheapest_over_tasks_and_nodes() {
    // T4 spot is cheapest in us-east-2 (0.2022), H100:8 spot in us-east-1
    // (14.246). With one T4 node the total favours us-east-1 (0.2069 +
    // 14.246 < 0.2022 + 15.06); with 200 it favours us-east-2 (200 x
    // 0.2069 + 14.246 = 55.626 > 200 x 0.2022 + 15.06 = 55.5).
    let group = |nodes: u32| {
        format!(
            "name: g\nexecution: parallel\n---\nname: small\nnum_nodes: {nodes}\nresources:\n  accelerators: T4:1\n  use_spot: true\nrun: echo\n---\nname: big\nresources:\n  accelerators: H100:8\n  use_spot: true\nrun: echo\n"
        )
    };
    let one = spec(&group(1), Cloud::Aws);
    assert_eq!(one["region"], "us-east-1");
    assert_eq!(one["hourly_price"], 14.4529);
    assert_eq!(one["tasks"][0]["zone"], "use1-az5");
    let many = spec(&group(200), Cloud::Aws);
    assert_eq!(many["region"], "us-east-2");
    assert_eq!(many["hourly_price"], 55.5);
    let regions: Vec<&str> = many["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["region"].as_str().unwrap())
        .collect();
    assert_eq!(regions, vec!["us-east-2", "us-east-1", "us-west-2"]);
    assert_eq!(many["regions"][1]["hourly_price"], 55.626);
}

#[test]
fn equal_totals_go_to_the_first_region_by_name() {
    // m6id.xlarge costs 0.2373 in all three regions.
    let doc = spec(&one_task("  cpus: 4\n"), Cloud::Aws);
    assert_eq!(doc["region"], "us-east-1");
    assert_eq!(doc["regions"].as_array().unwrap().len(), 3);
}

#[test]
fn tasks_with_no_region_in_common_are_a_located_error() {
    let text = "name: split\nexecution: parallel\n---\nname: a\nresources:\n  infra: aws/us-east-1\nrun: echo\n---\nname: b\nresources:\n  infra: aws/us-west-2\nrun: echo\n";
    let (c, doc) = build("split.yaml", text, Cloud::Aws);
    assert!(doc.is_none());
    let out = render_human(&c);
    assert!(out.contains("error[cloud-no-common-region]"), "{out}");
    assert!(out.contains("split.yaml:1:7"), "at the group's name: {out}");
    assert!(out.contains("`a` in us-east-1; `b` in us-west-2"), "{out}");
}

#[test]
fn candidates_for_other_clouds_are_dropped_or_refused() {
    let text = one_task(
        "  any_of:\n    - {infra: gcp, accelerators: L4:1}\n    - {infra: aws, accelerators: T4:1}\n",
    );
    let (c, doc) = build("g.yaml", &text, Cloud::Aws);
    assert_eq!(doc.unwrap()["tasks"][0]["instance_type"], "g4dn.xlarge");
    assert!(render_human(&c).contains(
        "warning[cloud-ignored]: task `t`: the resource choices pinned to gcp are dropped"
    ));
    let (c, doc) = build("g.yaml", &one_task("  infra: gcp\n"), Cloud::Aws);
    assert!(doc.is_none());
    let out = render_human(&c);
    assert!(
        out.contains("error[cloud-no-instance]: `t` may only run on gcp, not on AWS"),
        "{out}"
    );
    let (c, doc) = build("g.yaml", &one_task("  infra: kubernetes\n"), Cloud::Gcp);
    assert!(doc.is_none());
    assert!(render_human(&c).contains("may only run on kubernetes, not on GCP"));
}

// ------------------------------------------------------------ behaviour

/// Names of every accelerator in the snapshots, some spelled otherwise,
/// and some that exist nowhere.
fn accelerator_names() -> Vec<String> {
    let mut names: Vec<String> = CLOUDS
        .iter()
        .flat_map(|c| {
            catalog(*c)
                .rows
                .iter()
                .filter_map(|r| r.accelerator.clone())
        })
        .collect();
    names.sort();
    names.dedup();
    let lower: Vec<String> = names.iter().map(|n| n.to_lowercase()).collect();
    names.extend(lower);
    names.extend(["A10".into(), "H1000".into(), "tpu-v4-8".into(), "".into()]);
    names
}

fn request() -> impl Strategy<Value = Request> {
    let names = accelerator_names();
    let regions = vec![
        "us-east-1",
        "us-east-2",
        "us-west-2",
        "us-central1",
        "us-east4",
        "europe-west4",
        "mars-1",
    ];
    let bound = prop_oneof![
        (1u32..=128).prop_map(|v| Bound::Exactly(f64::from(v))),
        (1u32..=128).prop_map(|v| Bound::AtLeast(f64::from(v))),
    ];
    let memory = prop_oneof![
        (1u32..=2048).prop_map(|v| Bound::Exactly(f64::from(v))),
        (1u32..=2048).prop_map(|v| Bound::AtLeast(f64::from(v))),
        (1u32..=16).prop_map(|v| Bound::PerCpu(f64::from(v))),
    ];
    (
        proptest::option::of((
            proptest::sample::select(names),
            prop_oneof![
                Just(0.5),
                Just(1.0),
                Just(2.0),
                Just(4.0),
                Just(8.0),
                Just(16.0)
            ],
        )),
        proptest::option::of(bound),
        proptest::option::of(memory),
        any::<bool>(),
        proptest::option::of(proptest::sample::select(regions)),
    )
        .prop_map(|(accelerator, cpus, memory, use_spot, region)| Request {
            accelerator,
            cpus,
            memory,
            use_spot,
            region: region.map(str::to_owned),
            ..Request::default()
        })
}

/// What holds for any request: every offer is of one instance type, in
/// the pinned region, priced in the market's column, with the asked
/// accelerator and cpus/memory; a refusal says why.
#[test]
fn any_request_gets_offers_that_satisfy_it_or_a_reason() {
    let mut runner = TestRunner::new(Config {
        cases: 400,
        ..Config::default()
    });
    runner
        .run(&(request(), any::<bool>()), |(req, gcp)| {
            let cloud = if gcp { Cloud::Gcp } else { Cloud::Aws };
            match select::offers(catalog(cloud), &req) {
                Err(e) => prop_assert!(!e.reason.is_empty()),
                Ok(offers) => {
                    prop_assert!(!offers.is_empty());
                    for o in &offers {
                        prop_assert_eq!(&o.instance_type, &offers[0].instance_type);
                        prop_assert!(o.price >= 0.0 && o.price.is_finite());
                        prop_assert_eq!(o.use_spot, req.use_spot);
                        if let Some(r) = &req.region {
                            prop_assert!(o.region.eq_ignore_ascii_case(r));
                        }
                        if let Some((name, count)) = &req.accelerator {
                            let (n, c) = o.accelerator.clone().expect("an accelerator");
                            prop_assert!(n.eq_ignore_ascii_case(name));
                            prop_assert!((c - count).abs() <= 0.01);
                        }
                        if let Some(c) = req.cpus {
                            prop_assert!(c.admits(o.vcpus, None));
                        }
                        if let Some(m) = req.memory {
                            prop_assert!(m.admits(o.memory_gib, o.vcpus));
                        }
                        // The offer's rows have a price in its market.
                        let rows: Vec<_> = catalog(cloud)
                            .of_type(&o.instance_type)
                            .filter(|r| r.region == o.region)
                            .filter(|r| o.zone.is_none() || r.zone == o.zone)
                            .collect();
                        prop_assert!(rows.iter().any(|r| r.price_for(req.use_spot).is_some()));
                    }
                    // Zonal offers come per zone (GCP, spot); AWS
                    // on-demand per region.
                    let zonal = cloud == Cloud::Gcp || req.use_spot;
                    prop_assert!(offers.iter().all(|o| o.zone.is_some() == zonal));
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Random groups through the whole build: a spec whose tasks all run in
/// its region, whose total is the sum of its tasks, and whose every
/// request passes the API model; or only located errors.
#[test]
fn any_group_builds_a_consistent_spec_or_located_errors() {
    let task = (
        proptest::sample::select(vec![
            "",
            "  accelerators: T4:1\n",
            "  accelerators: A100:8\n",
            "  accelerators: H100:8\n  use_spot: true\n",
            "  accelerators: L4:1\n",
            "  accelerators: H100:3\n",
            "  cpus: 4+\n",
            "  cpus: 2\n  memory: 8\n",
            "  memory: 64+\n",
            "  infra: aws/us-east-1\n",
            "  infra: gcp/us-east4\n",
            "  any_of:\n    - {accelerators: A100:1}\n    - {accelerators: T4:1, use_spot: true}\n",
            "  ordered:\n    - {accelerators: B200:8}\n    - {cpus: 4+}\n",
            "  instance_type: m6i.4xlarge\n",
            "  instance_type: n1-highmem-8\n  accelerators: T4:1\n",
        ]),
        1u32..4,
    );
    let mut runner = TestRunner::new(Config {
        cases: 150,
        ..Config::default()
    });
    runner
        .run(&(proptest::collection::vec(task, 1..4), any::<bool>()), |(tasks, gcp)| {
            let cloud = if gcp { Cloud::Gcp } else { Cloud::Aws };
            let mut text = String::from("name: prop\nexecution: parallel\n");
            for (i, (resources, nodes)) in tasks.iter().enumerate() {
                text.push_str(&format!(
                    "---\nname: t{i}\nnum_nodes: {nodes}\nresources:\n{resources}  disk_size: 100\nrun: echo {i}\n"
                ));
            }
            let (c, doc) = build("prop.yaml", &text, cloud);
            match doc {
                None => {
                    prop_assert!(c.has_errors());
                    for d in c.diagnostics.iter().filter(|d| d.is_error()) {
                        prop_assert!(d.rule.name().starts_with("cloud-"), "{}", render_human(&c));
                        prop_assert!(d.primary.span.end > 0);
                    }
                }
                Some(doc) => {
                    let region = doc["region"].as_str().unwrap();
                    let mut total = 0.0;
                    for t in doc["tasks"].as_array().unwrap() {
                        total += t["hourly_price"].as_f64().unwrap();
                    }
                    let stated = doc["hourly_price"].as_f64().unwrap();
                    prop_assert!((total - stated).abs() < 1e-4, "{total} != {stated}");
                    prop_assert_eq!(doc["regions"][0]["region"].as_str(), Some(region));
                    for n in doc["nodes"].as_array().unwrap() {
                        let zone = n["zone"].as_str().unwrap_or(region);
                        let in_region = match cloud {
                            Cloud::Gcp => zone.starts_with(region),
                            Cloud::Aws => catalog(cloud).rows.iter().any(|r| r.region == region && (n["zone"].is_null() || r.zone.as_deref() == Some(zone))),
                        };
                        prop_assert!(in_region, "{} not in {region}", n["hostname"]);
                    }
                    let problems = super::api::check_spec(cloud, &doc);
                    prop_assert!(problems.is_empty(), "{}", problems.join("\n"));
                }
            }
            Ok(())
        })
        .unwrap();
}
