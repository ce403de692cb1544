//! A volume on Kubernetes (`skyc volume apply --target k8s`): the
//! PersistentVolumeClaim that tasks mount by its name (`volumes: {PATH:
//! NAME}`, a `persistentVolumeClaim` volume of each pod), as SkyPilot
//! makes it from its volume file: `size` the request, `config.access_mode`
//! (default `ReadWriteOnce`), `config.storage_class_name` (else the
//! cluster's default class), `config.namespace`.

use super::names;
use serde_json::{Map, Value, json};
use skyc_compiler::ir::Volume;

/// The access modes a claim may ask for.
pub const ACCESS_MODES: &[&str] = &[
    "ReadWriteOnce",
    "ReadWriteOncePod",
    "ReadWriteMany",
    "ReadOnlyMany",
];

/// The label skyc marks its claims with (the volume's name): one it
/// finds without it is someone else's.
pub const VOLUME_LABEL: &str = "skyc.io/volume";

/// A string setting of the volume file's `config`.
fn setting<'a>(volume: &'a Volume, key: &str) -> Option<&'a str> {
    volume.config.as_ref()?.get(key)?.as_str()
}

/// The namespace the volume file names, if any.
pub fn namespace(volume: &Volume) -> Option<&str> {
    setting(volume, "namespace")
}

/// The kubeconfig context the volume file names (`infra: k8s/CONTEXT`).
pub fn context(volume: &Volume) -> Option<&str> {
    let infra = volume.infra.as_deref()?;
    let rest = infra
        .strip_prefix("k8s/")
        .or_else(|| infra.strip_prefix("kubernetes/"))?;
    (!rest.is_empty()).then_some(rest)
}

/// The claim of `volume` in `namespace`, or why it cannot be one.
pub fn claim(volume: &Volume, namespace: &str) -> Result<Value, String> {
    let name = &volume.name;
    if !names::is_dns1123_subdomain(name) {
        return Err(format!(
            "`{name}` cannot name a PersistentVolumeClaim: lowercase letters, digits, `-` and \
             `.`, starting and ending with a letter or digit, at most 253 characters"
        ));
    }
    if volume.r#type != "k8s-pvc" {
        return Err(format!(
            "a volume of type `{}` is not made by skyc on Kubernetes; skyc makes `k8s-pvc` \
             volumes (PersistentVolumeClaims)",
            volume.r#type
        ));
    }
    let access = setting(volume, "access_mode").unwrap_or("ReadWriteOnce");
    if !ACCESS_MODES.contains(&access) {
        return Err(format!(
            "`config.access_mode: {access}` is not an access mode: one of {}",
            ACCESS_MODES.join(", ")
        ));
    }
    let mut spec = Map::new();
    spec.insert("accessModes".into(), json!([access]));
    if let Some(gb) = volume.size_gb {
        spec.insert(
            "resources".into(),
            json!({"requests": {"storage": format!("{gb}Gi")}}),
        );
    }
    // `""` is Kubernetes' "no class" (a pre-made volume bound statically).
    if let Some(class) = setting(volume, "storage_class_name") {
        spec.insert("storageClassName".into(), json!(class));
    }
    Ok(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                VOLUME_LABEL: name,
                // SkyPilot's own, so its tools know the claim too.
                "skypilot-name": name,
            },
        },
        "spec": spec,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use skyc_compiler::ir::At;

    fn volume(config: Value) -> Volume {
        Volume {
            name: "ckpts".into(),
            r#type: "k8s-pvc".into(),
            infra: Some("k8s/prod".into()),
            size_gb: Some(100),
            use_existing: false,
            config: Some(config),
            at: At::default(),
        }
    }

    #[test]
    fn a_claim_as_skypilot_makes_it() {
        let v = volume(json!({"access_mode": "ReadWriteMany", "storage_class_name": "nfs"}));
        let c = claim(&v, "team").unwrap();
        assert_eq!(c["spec"]["accessModes"], json!(["ReadWriteMany"]));
        assert_eq!(c["spec"]["resources"]["requests"]["storage"], "100Gi");
        assert_eq!(c["spec"]["storageClassName"], "nfs");
        assert_eq!(c["metadata"]["namespace"], "team");
        assert_eq!(c["metadata"]["labels"][VOLUME_LABEL], "ckpts");
        assert_eq!(context(&v), Some("prod"));
        // The defaults: ReadWriteOnce, the cluster's class.
        let c = claim(&volume(json!({})), "team").unwrap();
        assert_eq!(c["spec"]["accessModes"], json!(["ReadWriteOnce"]));
        assert!(c["spec"].get("storageClassName").is_none());
    }

    #[test]
    fn what_cannot_be_a_claim_is_said() {
        let mut v = volume(json!({"access_mode": "ReadWriteSometimes"}));
        assert!(
            claim(&v, "team")
                .unwrap_err()
                .contains("not an access mode")
        );
        v.config = None;
        v.name = "Checkpoints".into();
        assert!(claim(&v, "team").unwrap_err().contains("cannot name"));
        v.name = "ckpts".into();
        v.r#type = "runpod-network-volume".into();
        assert!(claim(&v, "team").unwrap_err().contains("k8s-pvc"));
    }
}
