//! EC2's XML answers, read into the little the runtime needs: instances
//! (id, state and why, addresses, zone, type, tags), security groups, the
//! pagination token, and errors.
//!
//! Elements are matched by local name (EC2 answers in its namespace) and
//! by position in the documented structure, so an unknown element is
//! ignored rather than refused.

pub use crate::cloud::instance::{Instance, State};
use roxmltree::{Document, Node};
use std::collections::BTreeMap;

/// One security group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub tags: BTreeMap<String, String>,
}

/// An error answer: `<Response><Errors><Error><Code>..`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub code: String,
    pub message: String,
    pub request_id: Option<String>,
}

fn child<'a, 'i>(node: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    node.children()
        .find(|c| c.is_element() && c.tag_name().name() == name)
}

fn text(node: Node<'_, '_>, name: &str) -> Option<String> {
    child(node, name)
        .and_then(|c| c.text())
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

/// The `item`s of a `<name>` list under `node`.
fn items<'a, 'i>(node: Node<'a, 'i>, name: &str) -> impl Iterator<Item = Node<'a, 'i>> {
    child(node, name)
        .into_iter()
        .flat_map(|list| list.children())
        .filter(|c| c.is_element() && c.tag_name().name() == "item")
}

fn tags(node: Node<'_, '_>) -> BTreeMap<String, String> {
    items(node, "tagSet")
        .filter_map(|t| Some((text(t, "key")?, text(t, "value").unwrap_or_default())))
        .collect()
}

fn instance(node: Node<'_, '_>) -> Instance {
    let state = child(node, "instanceState").and_then(|s| text(s, "name"));
    let reason = child(node, "stateReason");
    Instance {
        id: text(node, "instanceId").unwrap_or_default(),
        state: state.as_deref().and_then(State::parse),
        reason_code: reason.and_then(|r| text(r, "code")),
        reason_message: reason.and_then(|r| text(r, "message")),
        instance_type: text(node, "instanceType").unwrap_or_default(),
        zone: child(node, "placement").and_then(|p| text(p, "availabilityZone")),
        private_ip: text(node, "privateIpAddress"),
        public_ip: text(node, "ipAddress"),
        lifecycle: text(node, "instanceLifecycle"),
        client_token: text(node, "clientToken"),
        key_name: text(node, "keyName"),
        tags: tags(node),
    }
}

/// Why an answer could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable(pub String);

fn parse(xml: &str) -> Result<Document<'_>, Unreadable> {
    Document::parse(xml).map_err(|e| Unreadable(format!("not XML: {e}")))
}

/// The instances of a DescribeInstances answer (`reservationSet`) or a
/// RunInstances one (`instancesSet` at the top), and the next page's
/// token.
pub fn instances(xml: &str) -> Result<(Vec<Instance>, Option<String>), Unreadable> {
    let doc = parse(xml)?;
    let root = doc.root_element();
    let mut out: Vec<Instance> = items(root, "instancesSet").map(instance).collect();
    for reservation in items(root, "reservationSet") {
        out.extend(items(reservation, "instancesSet").map(instance));
    }
    if out.iter().any(|i| i.id.is_empty()) {
        return Err(Unreadable("an instance without an instanceId".into()));
    }
    Ok((out, text(root, "nextToken")))
}

/// The security groups of a DescribeSecurityGroups answer.
pub fn security_groups(xml: &str) -> Result<(Vec<SecurityGroup>, Option<String>), Unreadable> {
    let doc = parse(xml)?;
    let root = doc.root_element();
    let groups: Vec<SecurityGroup> = items(root, "securityGroupInfo")
        .map(|g| SecurityGroup {
            id: text(g, "groupId").unwrap_or_default(),
            name: text(g, "groupName").unwrap_or_default(),
            tags: tags(g),
        })
        .collect();
    if groups.iter().any(|g| g.id.is_empty()) {
        return Err(Unreadable("a security group without a groupId".into()));
    }
    Ok((groups, text(root, "nextToken")))
}

/// The `groupId` of a CreateSecurityGroup answer.
pub fn group_id(xml: &str) -> Result<String, Unreadable> {
    let doc = parse(xml)?;
    text(doc.root_element(), "groupId").ok_or_else(|| Unreadable("no groupId".into()))
}

/// The error in an answer, if it is one (EC2's `Response/Errors/Error`;
/// also the `ErrorResponse/Error` other Query APIs use).
pub fn error(xml: &str) -> Option<ApiError> {
    let doc = Document::parse(xml).ok()?;
    let root = doc.root_element();
    let err = child(root, "Errors")
        .and_then(|e| child(e, "Error"))
        .or_else(|| child(root, "Error"))?;
    Some(ApiError {
        code: text(err, "Code").unwrap_or_default(),
        message: text(err, "Message").unwrap_or_default(),
        request_id: text(root, "RequestID").or_else(|| text(root, "RequestId")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shaped as EC2 answers (the documented DescribeInstances example,
    /// trimmed), with a spot instance interrupted.
    const DESCRIBE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>8f7724cf-496f-496e-8fe3-example</requestId>
  <reservationSet>
    <item>
      <reservationId>r-1234567890abcdef0</reservationId>
      <instancesSet>
        <item>
          <instanceId>i-1234567890abcdef0</instanceId>
          <instanceState><code>48</code><name>terminated</name></instanceState>
          <instanceType>g5.xlarge</instanceType>
          <placement><availabilityZone>us-east-1a</availabilityZone></placement>
          <privateIpAddress>10.0.0.12</privateIpAddress>
          <ipAddress>54.194.252.215</ipAddress>
          <instanceLifecycle>spot</instanceLifecycle>
          <stateReason>
            <code>Server.SpotInstanceTermination</code>
            <message>Server.SpotInstanceTermination: Spot instance termination</message>
          </stateReason>
          <clientToken>skyc-abc</clientToken>
          <tagSet>
            <item><key>skyc-task</key><value>trainer</value></item>
            <item><key>skyc-rank</key><value>1</value></item>
            <item><key>empty</key><value/></item>
          </tagSet>
          <networkInterfaceSet><item><tagSet><item><key>x</key><value>nested</value></item></tagSet></item></networkInterfaceSet>
        </item>
      </instancesSet>
    </item>
    <item>
      <instancesSet>
        <item>
          <instanceId>i-2</instanceId>
          <instanceState><code>16</code><name>running</name></instanceState>
          <stateReason><code/><message/></stateReason>
        </item>
      </instancesSet>
    </item>
  </reservationSet>
  <nextToken>page2</nextToken>
</DescribeInstancesResponse>"#;

    #[test]
    fn describe_instances() {
        let (list, next) = instances(DESCRIBE).unwrap();
        assert_eq!(next.as_deref(), Some("page2"));
        assert_eq!(list.len(), 2);
        let i = &list[0];
        assert_eq!(i.id, "i-1234567890abcdef0");
        assert_eq!(i.state, Some(State::Terminated));
        assert_eq!(
            i.reason_code.as_deref(),
            Some("Server.SpotInstanceTermination")
        );
        assert_eq!(i.zone.as_deref(), Some("us-east-1a"));
        assert_eq!(i.private_ip.as_deref(), Some("10.0.0.12"));
        assert_eq!(i.lifecycle.as_deref(), Some("spot"));
        assert_eq!(i.client_token.as_deref(), Some("skyc-abc"));
        // Only the instance's own tags, not its interfaces'.
        assert_eq!(i.tags.len(), 3);
        assert_eq!(i.tags["skyc-rank"], "1");
        assert_eq!(i.tags["empty"], "");
        assert_eq!(list[1].state, Some(State::Running));
        assert_eq!(list[1].reason_code, None);
    }

    #[test]
    fn run_instances_and_groups() {
        let run = r#"<RunInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15"><reservationId>r-1</reservationId><instancesSet><item><instanceId>i-9</instanceId><instanceState><code>0</code><name>pending</name></instanceState></item></instancesSet></RunInstancesResponse>"#;
        let (list, next) = instances(run).unwrap();
        assert_eq!(list[0].id, "i-9");
        assert_eq!(list[0].state, Some(State::Pending));
        assert_eq!(next, None);
        let sgs = r#"<DescribeSecurityGroupsResponse><securityGroupInfo><item><groupId>sg-1</groupId><groupName>skyc-g</groupName><tagSet><item><key>skyc-run</key><value>r</value></item></tagSet><ipPermissions><item><groups><item><groupId>sg-1</groupId></item></groups></item></ipPermissions></item></securityGroupInfo></DescribeSecurityGroupsResponse>"#;
        let (groups, _) = security_groups(sgs).unwrap();
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].id, "sg-1");
        assert_eq!(groups[0].tags["skyc-run"], "r");
        assert_eq!(
            group_id("<CreateSecurityGroupResponse><return>true</return><groupId>sg-7</groupId></CreateSecurityGroupResponse>").unwrap(),
            "sg-7"
        );
    }

    #[test]
    fn errors_and_garbage() {
        let e = error(r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>ab-12</RequestID></Response>"#)
        .unwrap();
        assert_eq!(e.code, "RequestLimitExceeded");
        assert_eq!(e.message, "Request limit exceeded.");
        assert_eq!(e.request_id.as_deref(), Some("ab-12"));
        assert_eq!(error("<html>bad gateway</html>"), None);
        assert_eq!(error("not xml"), None);
        assert!(instances("<<<").is_err());
        assert!(instances("<R><instancesSet><item><x/></item></instancesSet></R>").is_err());
        assert_eq!(State::parse("rebooting"), None);
    }
}
