//! SkyPilot's instance catalog (`<cloud>/vms.csv`, schema v8) as rows.
//!
//! Columns are found by name, not position (newer fetchers add columns).
//! An AWS row is one instance type in one availability zone (a zone ID such
//! as `use1-az4`); a GCP row is either a host VM in a zone or, with the
//! instance columns empty, an accelerator in a zone priced on its own.
//! Parsing is pure: the command line reads the files and hands their text
//! here. The snapshot skyc ships is built in (`targets/catalog/`).

use super::Cloud;
use super::csv::{self, Record};

/// One catalog row. Empty cells are `None`.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub instance_type: Option<String>,
    pub accelerator: Option<String>,
    pub accelerator_count: Option<f64>,
    pub vcpus: Option<f64>,
    pub memory_gib: Option<f64>,
    /// On-demand $/h.
    pub price: Option<f64>,
    /// Spot $/h at crawl time.
    pub spot_price: Option<f64>,
    pub region: String,
    pub zone: Option<String>,
    /// AWS only: `x86_64`, `arm64`, ...
    pub arch: Option<String>,
}

impl Row {
    /// The price column SkyPilot reads for this market.
    pub fn price_for(&self, spot: bool) -> Option<f64> {
        if spot { self.spot_price } else { self.price }
    }
}

/// Where a catalog came from, shown in the spec so a reviewer knows which
/// prices the choice was made with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// A path, or a description of the built-in snapshot.
    pub source: String,
    /// `YYYY-MM-DD`: the snapshot's date, or the file's modification day.
    pub date: Option<String>,
}

/// The rows of one cloud.
#[derive(Clone, Debug)]
pub struct Catalog {
    pub cloud: Cloud,
    pub rows: Vec<Row>,
    pub origin: Origin,
}

/// A catalog file skyc cannot read: the line and why.
#[derive(Debug, PartialEq, Eq)]
pub struct CatalogError {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for CatalogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// The date of the built-in snapshot (see `targets/catalog/README.md`).
pub const SNAPSHOT_DATE: &str = "2026-11-23";

const SNAPSHOT_AWS: &str = include_str!("../../catalog/v8/aws/vms.csv");
const SNAPSHOT_GCP: &str = include_str!("../../catalog/v8/gcp/vms.csv");

/// Columns every cloud's file must have.
const REQUIRED: &[&str] = &[
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "Price",
    "SpotPrice",
    "Region",
    "AvailabilityZone",
];

impl Catalog {
    /// The snapshot built into skyc.
    pub fn snapshot(cloud: Cloud) -> Catalog {
        let text = match cloud {
            Cloud::Aws => SNAPSHOT_AWS,
            Cloud::Gcp => SNAPSHOT_GCP,
        };
        let origin = Origin {
            source: format!(
                "skyc's snapshot of skypilot-catalog v8 ({}/vms.csv, slices)",
                cloud.name()
            ),
            date: Some(SNAPSHOT_DATE.to_owned()),
        };
        // Tested: the snapshot parses (tests below).
        Catalog::parse(cloud, text, origin).unwrap_or_else(|_| Catalog {
            cloud,
            rows: Vec::new(),
            origin: Origin {
                source: "an unreadable built-in snapshot".to_owned(),
                date: None,
            },
        })
    }

    /// Reads the text of a `vms.csv`.
    pub fn parse(cloud: Cloud, text: &str, origin: Origin) -> Result<Catalog, CatalogError> {
        let mut header: Option<Record> = None;
        let mut at = std::collections::HashMap::new();
        let mut arch = None;
        let mut rows = Vec::new();
        csv::each_record(text, |record| {
            if header.is_none() {
                let column = |name: &str| record.fields.iter().position(|f| f.trim() == name);
                for name in REQUIRED {
                    let Some(i) = column(name) else {
                        return Err(CatalogError {
                            line: record.line,
                            message: format!("no `{name}` column (is this a SkyPilot v8 vms.csv?)"),
                        });
                    };
                    at.insert(*name, i);
                }
                arch = column("Arch");
                header = Some(record);
                return Ok(());
            }
            rows.push(row(&record, &at, arch)?);
            Ok(())
        })?;
        if header.is_none() {
            return Err(CatalogError {
                line: 1,
                message: "the file is empty".to_owned(),
            });
        }
        if cloud == Cloud::Aws {
            rows = deduplicate(rows);
        }
        Ok(Catalog {
            cloud,
            rows,
            origin,
        })
    }

    /// Every row of one instance type.
    pub fn of_type<'a>(&'a self, instance_type: &'a str) -> impl Iterator<Item = &'a Row> + 'a {
        self.rows
            .iter()
            .filter(move |r| r.instance_type.as_deref() == Some(instance_type))
    }

    /// The catalog's spelling of a region, matched case-insensitively.
    pub fn region(&self, name: &str) -> Option<&str> {
        self.rows
            .iter()
            .find(|r| r.region.eq_ignore_ascii_case(name))
            .map(|r| r.region.as_str())
    }

    /// Distinct regions, sorted.
    pub fn regions(&self) -> Vec<&str> {
        let mut all: Vec<&str> = self.rows.iter().map(|r| r.region.as_str()).collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Distinct instance types (host rows), sorted.
    pub fn instance_types(&self) -> Vec<&str> {
        let mut all: Vec<&str> = self
            .rows
            .iter()
            .filter_map(|r| r.instance_type.as_deref())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

fn row(
    record: &Record,
    at: &std::collections::HashMap<&str, usize>,
    arch: Option<usize>,
) -> Result<Row, CatalogError> {
    let cell = |i: usize| -> Option<String> {
        let s = record.fields.get(i)?.trim();
        (!s.is_empty()).then(|| s.to_owned())
    };
    let text = |name: &str| cell(at[name]);
    let number = |name: &str| -> Result<Option<f64>, CatalogError> {
        let Some(s) = text(name) else {
            return Ok(None);
        };
        // pandas writes a missing float as an empty cell; read `nan` too.
        if s.eq_ignore_ascii_case("nan") {
            return Ok(None);
        }
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
            _ => Err(CatalogError {
                line: record.line,
                message: format!("`{name}` is `{s}`, not a non-negative number"),
            }),
        }
    };
    let Some(region) = text("Region") else {
        return Err(CatalogError {
            line: record.line,
            message: "the row has no `Region`".to_owned(),
        });
    };
    Ok(Row {
        instance_type: text("InstanceType"),
        accelerator: text("AcceleratorName"),
        accelerator_count: number("AcceleratorCount")?,
        vcpus: number("vCPUs")?,
        memory_gib: number("MemoryGiB")?,
        price: number("Price")?,
        spot_price: number("SpotPrice")?,
        region,
        zone: text("AvailabilityZone"),
        arch: arch.and_then(cell),
    })
}

/// SkyPilot's `_deduplicate_catalog` for AWS: one row per (type, region,
/// zone), the one with the lowest spot price (an empty one last). Row
/// order is otherwise kept.
fn deduplicate(rows: Vec<Row>) -> Vec<Row> {
    let mut kept: Vec<Row> = Vec::with_capacity(rows.len());
    let mut index: std::collections::HashMap<(Option<String>, String, Option<String>), usize> =
        std::collections::HashMap::new();
    for r in rows {
        let key = (r.instance_type.clone(), r.region.clone(), r.zone.clone());
        match index.get(&key) {
            Some(&i) => {
                let better = match (r.spot_price, kept[i].spot_price) {
                    (Some(a), Some(b)) => a < b,
                    (Some(_), None) => true,
                    _ => false,
                };
                if better {
                    kept[i] = r;
                }
            }
            None => {
                index.insert(key, kept.len());
                kept.push(r);
            }
        }
    }
    kept
}

impl From<csv::CsvError> for CatalogError {
    fn from(e: csv::CsvError) -> Self {
        CatalogError {
            line: e.line,
            message: e.message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshots_parse() {
        let aws = Catalog::snapshot(Cloud::Aws);
        assert_eq!(aws.rows.len(), 379);
        assert!(aws.rows.iter().any(|r| r.arch.as_deref() == Some("arm64")));
        let gcp = Catalog::snapshot(Cloud::Gcp);
        assert_eq!(gcp.rows.len(), 370);
        // Accelerator rows carry no instance type.
        assert!(
            gcp.rows
                .iter()
                .any(|r| r.instance_type.is_none() && r.accelerator.as_deref() == Some("T4"))
        );
    }

    #[test]
    fn columns_by_name_and_located_errors() {
        let origin = Origin {
            source: "t".into(),
            date: None,
        };
        let text = "Region,InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,AvailabilityZone,Extra\n\
                    us-east-1,m6i.large,,,2.0,8.0,0.096,,use1-az1,x\n";
        let c = Catalog::parse(Cloud::Aws, text, origin.clone()).unwrap();
        assert_eq!(c.rows[0].instance_type.as_deref(), Some("m6i.large"));
        assert_eq!(c.rows[0].spot_price, None);
        let bad = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n\
                   a,,,2,8,cheap,,r,z\n";
        let e = Catalog::parse(Cloud::Aws, bad, origin.clone()).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("`Price` is `cheap`"));
        let e = Catalog::parse(Cloud::Gcp, "InstanceType,vCPUs\n", origin).unwrap_err();
        assert!(e.message.contains("no `AcceleratorName` column"));
    }

    #[test]
    fn aws_keeps_the_cheapest_spot_row_per_zone() {
        let text = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n\
                    a,,,2,8,1.0,,r,z1\n\
                    a,,,2,8,1.0,0.5,r,z1\n\
                    a,,,2,8,1.0,0.7,r,z1\n\
                    a,,,2,8,1.0,0.9,r,z2\n";
        let c = Catalog::parse(
            Cloud::Aws,
            text,
            Origin {
                source: "t".into(),
                date: None,
            },
        )
        .unwrap();
        let spots: Vec<_> = c.rows.iter().map(|r| r.spot_price).collect();
        assert_eq!(spots, vec![Some(0.5), Some(0.9)]);
    }
}
