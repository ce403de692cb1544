//! The EC2 Query protocol: a request in the API's JSON shape (as `skyc
//! build --target aws` writes it, botocore's) to the form parameters EC2
//! takes, as botocore's `EC2Serializer` writes them.
//!
//! - A structure member is `Prefix.Name`, where the name is the member's
//!   `queryName`, else its `locationName` with the first letter
//!   upper-cased, else the member's own name: `SecurityGroups` is sent as
//!   `SecurityGroup.N`, `Description` of `CreateSecurityGroup` as
//!   `GroupDescription`.
//! - A list is always flattened: `Prefix.1`, `Prefix.2`, ...
//! - Booleans are `true`/`false`, numbers as written, strings as they are;
//!   `UserData` of `RunInstances` is base64-encoded (botocore's
//!   `base64_encode_user_data` handler), as the SDKs and the CLI send it.
//!
//! The names come from the service model itself: `ec2-requests.json` is
//! botocore's EC2 model (2016-11-15) cut to the input shapes of the
//! operations the build emits; a test derives it again from the model in
//! `tests/fixtures/cloud-api/`, so it cannot drift. A member the model
//! does not know is refused, at its path.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The EC2 API version every request names.
pub const VERSION: &str = "2016-11-15";

#[derive(Debug, Deserialize)]
struct Model {
    operations: BTreeMap<String, String>,
    shapes: BTreeMap<String, Shape>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Shape {
    /// Member name to (wire name, shape).
    Structure {
        members: BTreeMap<String, (String, String)>,
    },
    List {
        member: String,
    },
    String,
    Integer,
    Long,
    Boolean,
    Double,
    Float,
    Timestamp,
    Blob,
}

const MODEL_JSON: &str = include_str!("ec2-requests.json");

fn model() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    // The file is part of the source and tested; it always parses.
    MODEL.get_or_init(|| serde_json::from_str(MODEL_JSON).expect("ec2-requests.json parses"))
}

/// A request the model cannot serialize: which member, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryError {
    pub operation: String,
    /// `TagSpecifications[0].Tags[1].Key`.
    pub path: String,
    pub why: String,
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.operation, self.why)
        } else {
            write!(f, "{} `{}`: {}", self.operation, self.path, self.why)
        }
    }
}

impl std::error::Error for QueryError {}

/// The form parameters of `operation` with `request` (a JSON object), in
/// a fixed order: `Action`, `Version`, then the request's.
pub fn serialize(operation: &str, request: &Value) -> Result<Vec<(String, String)>, QueryError> {
    let model = model();
    let fail = |path: &str, why: String| QueryError {
        operation: operation.to_owned(),
        path: path.to_owned(),
        why,
    };
    let Some(input) = model.operations.get(operation) else {
        return Err(fail("", "not an operation skyc sends".into()));
    };
    let mut out = vec![
        ("Action".to_owned(), operation.to_owned()),
        ("Version".to_owned(), VERSION.to_owned()),
    ];
    let mut w = Writer {
        model,
        operation,
        out: &mut out,
    };
    w.value(input, request, "", "")
        .map_err(|(p, why)| fail(&p, why))?;
    Ok(out)
}

struct Writer<'a> {
    model: &'a Model,
    operation: &'a str,
    out: &'a mut Vec<(String, String)>,
}

impl Writer<'_> {
    /// Writes `value` of shape `shape` at wire prefix `prefix`; `path` is
    /// where it is in the JSON, for errors.
    fn value(
        &mut self,
        shape: &str,
        value: &Value,
        prefix: &str,
        path: &str,
    ) -> Result<(), (String, String)> {
        let fail = |why: String| Err((path.to_owned(), why));
        let Some(s) = self.model.shapes.get(shape) else {
            return fail(format!("shape `{shape}` is not in the model"));
        };
        match (s, value) {
            (Shape::Structure { members }, Value::Object(map)) => {
                for (name, v) in map {
                    let Some((wire, member_shape)) = members.get(name) else {
                        return Err((join(path, name), "not a member the EC2 API knows".into()));
                    };
                    let wire_prefix = if prefix.is_empty() {
                        wire.clone()
                    } else {
                        format!("{prefix}.{wire}")
                    };
                    let member_path = join(path, name);
                    if self.operation == "RunInstances" && path.is_empty() && name == "UserData" {
                        let Value::String(text) = v else {
                            return Err((member_path, "must be a string".into()));
                        };
                        let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                        self.out.push((wire_prefix, encoded));
                        continue;
                    }
                    self.value(member_shape, v, &wire_prefix, &member_path)?;
                }
                Ok(())
            }
            (Shape::List { member }, Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    self.value(
                        member,
                        item,
                        &format!("{prefix}.{}", i + 1),
                        &format!("{path}[{i}]"),
                    )?;
                }
                Ok(())
            }
            (Shape::String | Shape::Timestamp | Shape::Blob, Value::String(s)) => {
                self.out.push((prefix.to_owned(), s.clone()));
                Ok(())
            }
            (Shape::Boolean, Value::Bool(b)) => {
                self.out.push((prefix.to_owned(), b.to_string()));
                Ok(())
            }
            (Shape::Integer | Shape::Long, Value::Number(n)) if n.is_i64() || n.is_u64() => {
                self.out.push((prefix.to_owned(), n.to_string()));
                Ok(())
            }
            (Shape::Double | Shape::Float, Value::Number(n)) => {
                self.out.push((prefix.to_owned(), n.to_string()));
                Ok(())
            }
            (s, v) => fail(format!("expected {}, found {}", kind(s), json_kind(v))),
        }
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn kind(s: &Shape) -> &'static str {
    match s {
        Shape::Structure { .. } => "an object",
        Shape::List { .. } => "a list",
        Shape::String | Shape::Timestamp | Shape::Blob => "a string",
        Shape::Integer | Shape::Long => "an integer",
        Shape::Boolean => "a boolean",
        Shape::Double | Shape::Float => "a number",
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Parameters for the runtime's own calls: `Filter.N.Name` and
/// `Filter.N.Value.M` of `(name, values)`.
pub fn filters(params: &mut Vec<(String, String)>, filters: &[(&str, &[&str])]) {
    for (i, (name, values)) in filters.iter().enumerate() {
        params.push((format!("Filter.{}.Name", i + 1), (*name).to_owned()));
        for (j, v) in values.iter().enumerate() {
            params.push((format!("Filter.{}.Value.{}", i + 1, j + 1), (*v).to_owned()));
        }
    }
}

/// `Action` and `Version` of one of the runtime's own calls.
pub fn action(operation: &str) -> Vec<(String, String)> {
    vec![
        ("Action".to_owned(), operation.to_owned()),
        ("Version".to_owned(), VERSION.to_owned()),
    ]
}

/// `Name.1=v1&Name.2=v2`.
pub fn list(params: &mut Vec<(String, String)>, name: &str, values: &[&str]) {
    for (i, v) in values.iter().enumerate() {
        params.push((format!("{name}.{}", i + 1), (*v).to_owned()));
    }
}

/// The form body: `k=v&...`, each encoded as SigV4 encodes query values.
pub fn form(params: &[(String, String)]) -> String {
    params
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                crate::aws::ec2::sigv4::encode(k),
                crate::aws::ec2::sigv4::encode(v)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn get<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
        params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn run_instances_as_botocore_sends_it() {
        let request = json!({
            "ImageId": "ami-1",
            "InstanceType": "m6i.2xlarge",
            "MinCount": 1,
            "MaxCount": 1,
            "SecurityGroups": ["skyc-g"],
            "Placement": {"AvailabilityZoneId": "use1-az4", "GroupName": "pg"},
            "InstanceMarketOptions": {"MarketType": "spot", "SpotOptions": {"SpotInstanceType": "one-time"}},
            "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 256, "DeleteOnTermination": true}}],
            "TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "a", "Value": "1"}, {"Key": "b", "Value": "2"}]}],
            "UserData": "#!/bin/bash\necho hi\n",
            "ClientToken": "tok",
        });
        let p = serialize("RunInstances", &request).unwrap();
        assert_eq!(p[0], ("Action".into(), "RunInstances".into()));
        assert_eq!(p[1], ("Version".into(), "2016-11-15".into()));
        for (k, v) in [
            ("ImageId", "ami-1"),
            ("MinCount", "1"),
            ("SecurityGroup.1", "skyc-g"),
            ("Placement.AvailabilityZoneId", "use1-az4"),
            ("Placement.GroupName", "pg"),
            (
                "InstanceMarketOptions.SpotOptions.SpotInstanceType",
                "one-time",
            ),
            ("BlockDeviceMapping.1.DeviceName", "/dev/sda1"),
            ("BlockDeviceMapping.1.Ebs.VolumeSize", "256"),
            ("BlockDeviceMapping.1.Ebs.DeleteOnTermination", "true"),
            ("TagSpecification.1.ResourceType", "instance"),
            ("TagSpecification.1.Tag.2.Key", "b"),
            ("UserData", "IyEvYmluL2Jhc2gKZWNobyBoaQo="),
            ("ClientToken", "tok"),
        ] {
            assert_eq!(get(&p, k), Some(v), "{k}");
        }
    }

    #[test]
    fn names_depend_on_the_structure() {
        let p = serialize(
            "CreateSecurityGroup",
            &json!({"GroupName": "g", "Description": "d"}),
        )
        .unwrap();
        assert_eq!(get(&p, "GroupDescription"), Some("d"));
        let p = serialize(
            "AuthorizeSecurityGroupIngress",
            &json!({"GroupId": "sg-1", "IpPermissions": [
                {"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": "sg-1", "Description": "x"}]},
                {"IpProtocol": "tcp", "FromPort": 80, "ToPort": 81, "IpRanges": [{"CidrIp": "0.0.0.0/0"}]},
            ]}),
        )
        .unwrap();
        assert_eq!(get(&p, "IpPermissions.1.Groups.1.GroupId"), Some("sg-1"));
        assert_eq!(get(&p, "IpPermissions.1.Groups.1.Description"), Some("x"));
        assert_eq!(
            get(&p, "IpPermissions.2.IpRanges.1.CidrIp"),
            Some("0.0.0.0/0")
        );
        assert_eq!(get(&p, "IpPermissions.2.FromPort"), Some("80"));
    }

    #[test]
    fn refusals_name_the_member() {
        let e = serialize("RunInstances", &json!({"ImageId": "a", "Bogus": 1})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "RunInstances `Bogus`: not a member the EC2 API knows"
        );
        let e = serialize(
            "RunInstances",
            &json!({"TagSpecifications": [{"Tags": [{"Key": 3}]}]}),
        )
        .unwrap_err();
        assert_eq!(e.path, "TagSpecifications[0].Tags[0].Key");
        assert_eq!(e.why, "expected a string, found a number");
        assert!(serialize("DeleteVpc", &json!({})).is_err());
        assert!(serialize("RunInstances", &json!({"MinCount": 1.5})).is_err());
    }

    #[test]
    fn form_encoding() {
        let mut p = action("DescribeInstances");
        filters(&mut p, &[("tag:skyc-run", &["r 1", "r/2"])]);
        list(&mut p, "InstanceId", &["i-1"]);
        assert_eq!(
            form(&p),
            "Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=tag%3Askyc-run\
             &Filter.1.Value.1=r%201&Filter.1.Value.2=r%2F2&InstanceId.1=i-1"
        );
    }

    /// `ec2-requests.json` is exactly what the service model says: derived
    /// again here from botocore's model (the test fixture), shape by shape.
    #[test]
    fn the_embedded_model_is_botocores() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/cloud-api/aws-ec2-2016-11-15.subset.json"
        );
        let full: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let shapes = &full["shapes"];
        let mut derived: BTreeMap<String, Value> = BTreeMap::new();
        let mut todo: Vec<String> = model().operations.values().cloned().collect();
        for (op, input) in &model().operations {
            assert_eq!(
                full["operations"][op]["input"]["shape"].as_str(),
                Some(input.as_str())
            );
        }
        while let Some(name) = todo.pop() {
            if derived.contains_key(&name) {
                continue;
            }
            let s = &shapes[&name];
            let kind = s["type"].as_str().unwrap();
            let entry = match kind {
                "structure" => {
                    let mut members = serde_json::Map::new();
                    for (m, r) in s["members"].as_object().unwrap() {
                        let wire =
                            r["queryName"]
                                .as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| {
                                    r["locationName"].as_str().map_or_else(
                                        || m.clone(),
                                        |l| {
                                            let mut c = l.chars();
                                            let first = c.next().unwrap().to_ascii_uppercase();
                                            format!("{first}{}", c.as_str())
                                        },
                                    )
                                });
                        let shape = r["shape"].as_str().unwrap().to_owned();
                        todo.push(shape.clone());
                        members.insert(m.clone(), json!([wire, shape]));
                    }
                    json!({"type": "structure", "members": members})
                }
                "list" => {
                    let member = s["member"]["shape"].as_str().unwrap().to_owned();
                    todo.push(member.clone());
                    json!({"type": "list", "member": member})
                }
                other => json!({ "type": other }),
            };
            derived.insert(name, entry);
        }
        let embedded: Value = serde_json::from_str(MODEL_JSON).unwrap();
        let embedded: BTreeMap<String, Value> =
            serde_json::from_value(embedded["shapes"].clone()).unwrap();
        assert_eq!(embedded, derived);
    }
}
