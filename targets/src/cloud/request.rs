//! What one resource candidate asks of a cloud, in the terms SkyPilot's
//! catalog filters use: `cpus` and `memory` exact or a minimum, memory per
//! vCPU (`4x`, which only SkyPilot's own defaults write), an accelerator by
//! name and count, an explicit instance type, the market, a region or zone.

use skyc_compiler::ir::{Candidate, Quantity};
use std::fmt::Write as _;

/// An amount of vCPUs or GiB, as `_filter_with_cpus`/`_filter_with_mem`
/// compare it with a row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    /// `4`: the row's value is exactly this (`==` on the catalog floats).
    Exactly(f64),
    /// `4+`: at least this.
    AtLeast(f64),
    /// `4x` (memory only): at least this many GiB per vCPU of the row.
    PerCpu(f64),
}

impl Bound {
    /// Whether a row with `value` (and `vcpus`) satisfies it. A missing
    /// value never does, as a NaN never compares true in pandas.
    pub fn admits(self, value: Option<f64>, vcpus: Option<f64>) -> bool {
        let Some(v) = value else {
            return false;
        };
        match self {
            Bound::Exactly(x) => v == x,
            Bound::AtLeast(x) => v >= x,
            Bound::PerCpu(x) => vcpus.is_some_and(|c| v >= c * x),
        }
    }

    /// SkyPilot's spelling: `4`, `4+`, `4x`.
    pub fn text(self) -> String {
        match self {
            Bound::Exactly(x) => number(x),
            Bound::AtLeast(x) => format!("{}+", number(x)),
            Bound::PerCpu(x) => format!("{}x", number(x)),
        }
    }

    fn of(q: Quantity) -> Bound {
        if q.at_least {
            Bound::AtLeast(q.value)
        } else {
            Bound::Exactly(q.value)
        }
    }
}

/// One candidate's demands on the catalog.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Request {
    /// Name as written (matched case-insensitively) and count per node.
    pub accelerator: Option<(String, f64)>,
    pub cpus: Option<Bound>,
    pub memory: Option<Bound>,
    pub instance_type: Option<String>,
    pub use_spot: bool,
    pub region: Option<String>,
    pub zone: Option<String>,
}

impl Request {
    /// The request of an IR candidate. Its `infra` cloud is the caller's
    /// business (the target picks candidates for its cloud).
    pub fn of(c: &Candidate) -> Request {
        Request {
            accelerator: c.accelerator.as_ref().map(|a| (a.name.clone(), a.count)),
            cpus: c.cpus.map(Bound::of),
            memory: c.memory_gb.map(Bound::of),
            instance_type: c.instance_type.clone(),
            use_spot: c.use_spot,
            region: c.infra.as_ref().and_then(|i| i.region.clone()),
            zone: c.infra.as_ref().and_then(|i| i.zone.clone()),
        }
    }

    /// A short description for the spec and messages:
    /// `A100:8, cpus=8+, spot, in us-east-1`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(t) = &self.instance_type {
            parts.push(t.clone());
        }
        if let Some((name, count)) = &self.accelerator {
            parts.push(format!("{name}:{}", number(*count)));
        }
        if let Some(c) = self.cpus {
            parts.push(format!("cpus={}", c.text()));
        }
        if let Some(m) = self.memory {
            parts.push(format!("memory={}", m.text()));
        }
        if parts.is_empty() {
            parts.push("default CPU instance".to_owned());
        }
        let mut s = parts.join(", ");
        s.push_str(if self.use_spot {
            ", spot"
        } else {
            ", on-demand"
        });
        match (&self.region, &self.zone) {
            (_, Some(z)) => {
                let _ = write!(s, ", in {z}");
            }
            (Some(r), None) => {
                let _ = write!(s, ", in {r}");
            }
            _ => {}
        }
        s
    }
}

/// `8` for 8.0, `0.5` otherwise: numbers as people write them.
pub fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_compare_as_pandas_does() {
        assert!(Bound::Exactly(8.0).admits(Some(8.0), None));
        assert!(!Bound::Exactly(8.0).admits(Some(16.0), None));
        assert!(Bound::AtLeast(8.0).admits(Some(16.0), None));
        assert!(!Bound::AtLeast(8.0).admits(None, None));
        assert!(Bound::PerCpu(4.0).admits(Some(32.0), Some(8.0)));
        assert!(!Bound::PerCpu(4.0).admits(Some(16.0), Some(8.0)));
        assert!(!Bound::PerCpu(4.0).admits(Some(16.0), None));
    }

    #[test]
    fn descriptions() {
        let r = Request {
            accelerator: Some(("A100".into(), 8.0)),
            cpus: Some(Bound::AtLeast(8.0)),
            use_spot: true,
            region: Some("us-east-1".into()),
            ..Request::default()
        };
        assert_eq!(r.describe(), "A100:8, cpus=8+, spot, in us-east-1");
        assert_eq!(
            Request::default().describe(),
            "default CPU instance, on-demand"
        );
        assert_eq!(number(0.5), "0.5");
    }
}
