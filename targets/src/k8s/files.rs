//! A task's `workdir` and local `file_mounts` in its pods.
//!
//! Every node pod gets an init container, `skyc-files`, that puts each of
//! the task's snapshots (a tar stream, `skyc_runtime::files::tar`) into
//! an `emptyDir` of the pod's own, checks its SHA-256 against the one the
//! submission recorded, and unpacks it; the main container starts only
//! once that has succeeded. The main container sees an absolute
//! destination as a `subPath` mount of that directory; a destination
//! under `~` (the workdir, `~/sky_workdir`, among them) is placed by the
//! entrypoint, since the image decides where the home is
//! (`{task}.files.sh`). Writes go to the pod's own copy.
//!
//! Where the init container takes the streams from depends on the layout:
//! - the runtime's (`skyc run`): from the group's files pod,
//!   `{group}-skyc-files`, reached as `skyc-files.{group}` through the
//!   JobSet's headless Service, which the runtime fills once over
//!   `pods/exec`. So the API server carries each snapshot once per group
//!   (in chunks), never once per node. The streams are served under a
//!   random key kept in the Secret `{group}-skyc-files`: the pods read it,
//!   and nobody else on the cluster's network can name them.
//! - the manifests for kubectl (`skyc build`): from the ConfigMap
//!   `{group}-skyc-files`, mounted in the init container, when everything
//!   fits in one; else a located error.

use super::names::{self, CONTAINER};
use super::{Layout, Lowerer, MAX_CONFIG_MAP_BYTES, Options, metadata};
pub use crate::files::{Files, Pack};
use crate::files::{Mount, TAR_FILE_ENTRY, WORKDIR, under_home};
use crate::shell::single_quoted;
use base64::Engine as _;
use serde_json::{Map, Value, json};
use skyc_compiler::ir::Workdir;
use skyc_compiler::{Diagnostic, Rule, Severity, Span};

/// The image of the files pod and of every node's init container: it
/// needs `sh`, `wget`, `tar`, `sha256sum`, `chmod`, and `httpd` for the
/// files pod (BusyBox has them all in about 2 MB).
pub const DEFAULT_FILES_IMAGE: &str = "busybox:1.36";

/// Where a pod's copies are, in the init container and in the main one.
pub const FILES_DIR: &str = "/skyc-files";

/// The pod's copies: an `emptyDir`.
const FILES_VOLUME: &str = "skyc-files";

/// The streams of the manifests' ConfigMap, in the init container.
const TARS_DIR: &str = "/skyc-tars";
const TARS_VOLUME: &str = "skyc-tars";

/// The files pod's hostname under the group's subdomain. A node's is
/// `{task}-{rank}`, so it cannot be this.
pub const FILES_HOST: &str = "skyc-files";

/// The port the files pod serves on.
pub const FILES_PORT: u16 = 8080;

/// Where the files pod keeps the streams.
pub const SERVED_DIR: &str = "/files";

/// The variable, in the files pod and the init containers, holding the
/// key the streams are served under; the Secret's key of it.
pub const KEY_VAR: &str = "SKYC_FILES_KEY";
pub const KEY: &str = "key";

/// The init container's exit code when the files pod did not answer for
/// five minutes: the node is lost (the cluster's doing, not the task's),
/// not failed.
pub const UNREACHABLE_EXIT: i32 = 75;

/// The role label of the files pod.
pub const FILES_ROLE: &str = "files";

/// What a task's pods get for its files.
#[derive(Default)]
pub(super) struct TaskFiles {
    pub init: Option<Value>,
    pub mounts: Vec<Value>,
    pub volumes: Vec<Value>,
}

/// The pod's copy of mount `i`, relative to [`FILES_DIR`].
fn copy_of(i: usize, mount: &Mount) -> String {
    if mount.taken.dir {
        i.to_string()
    } else {
        format!("{i}/{TAR_FILE_ENTRY}")
    }
}

impl Lowerer<'_> {
    pub(super) fn files(&self) -> Option<&Files> {
        self.options.files.as_ref()
    }

    /// Task `index`'s files: its init container, the main container's
    /// mounts, the pod's volumes. Nothing when it has none.
    pub(super) fn task_files(&mut self, index: usize) -> TaskFiles {
        let Some(files) = self.files() else {
            return TaskFiles::default();
        };
        let mounts = files.of(index).to_vec();
        if mounts.is_empty() {
            return TaskFiles::default();
        }
        let mut script = String::from(UNPACK);
        if self.layout == Layout::Pods {
            script.push_str(FETCH);
        }
        let mut main_mounts = vec![json!({"name": FILES_VOLUME, "mountPath": FILES_DIR})];
        for (i, m) in mounts.iter().enumerate() {
            let sha = files
                .packs
                .get(&m.taken.digest)
                .map(|p| p.sha256.clone())
                .unwrap_or_default();
            script.push_str(&match self.layout {
                Layout::Pods => format!("fetch {} {sha} {i}\n", m.taken.digest),
                Layout::JobSet => format!("unpack {TARS_DIR}/{}.tar {sha} {i}\n", m.taken.digest),
            });
            if under_home(&m.destination).is_none() {
                main_mounts.push(json!({
                    "name": FILES_VOLUME,
                    "mountPath": m.destination.trim_end_matches('/'),
                    "subPath": copy_of(i, m),
                }));
            }
        }
        // Writable by the main container's user, whoever the image makes
        // it: group and others get the owner's permissions.
        script.push_str(&format!("chmod -R go=u {FILES_DIR}\n"));
        let script = script.replace("@GROUP@", &self.group.name);
        let mut init_mounts = vec![json!({"name": FILES_VOLUME, "mountPath": FILES_DIR})];
        let mut volumes = vec![json!({"name": FILES_VOLUME, "emptyDir": {}})];
        let mut init = Map::new();
        init.insert("name".into(), json!(FILES_VOLUME));
        init.insert("image".into(), json!(self.options.files_image));
        init.insert("command".into(), json!(["sh", "-c", script]));
        init.insert(
            "resources".into(),
            json!({"requests": {"cpu": "100m", "memory": "64Mi"}}),
        );
        match self.layout {
            Layout::Pods => {
                init.insert(
                    "env".into(),
                    json!([{
                        "name": KEY_VAR,
                        "valueFrom": {"secretKeyRef": {"name": names::files(&self.group.name), "key": KEY}},
                    }]),
                );
            }
            Layout::JobSet => {
                init_mounts
                    .push(json!({"name": TARS_VOLUME, "mountPath": TARS_DIR, "readOnly": true}));
                volumes.push(json!({
                    "name": TARS_VOLUME,
                    "configMap": {"name": names::files(&self.group.name)},
                }));
            }
        }
        init.insert("volumeMounts".into(), json!(init_mounts));
        TaskFiles {
            init: Some(Value::Object(init)),
            mounts: main_mounts,
            volumes,
        }
    }

    /// Task `index`'s `{task}.files.sh`: what the entrypoint does before
    /// setup, once the init container has put the copies in place: each
    /// destination under the home placed, then into the workdir.
    pub(super) fn home_script(&self, index: usize) -> Option<String> {
        let files = self.files()?;
        let mounts = files.of(index);
        let home: Vec<String> = mounts
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let rel = under_home(&m.destination)?;
                Some(format!(
                    "skyc_home {FILES_DIR}/{} {} || return 1\n",
                    copy_of(i, m),
                    single_quoted(rel)
                ))
            })
            .collect();
        if home.is_empty() {
            return None;
        }
        let mut script = format!(
            "# The files of task {} under the node's home.\n",
            self.group.tasks.get(index).map_or("", |t| t.name.as_str())
        );
        script.extend(home);
        if mounts.iter().any(|m| m.workdir) {
            let rel = under_home(WORKDIR).unwrap_or_default();
            script.push_str(&format!(
                "cd \"${{HOME:-/}}\"/{} || return 1\n",
                single_quoted(rel)
            ));
        }
        Some(script)
    }

    /// The entrypoint's part that runs `{task}.files.sh`, when a task has
    /// one.
    pub(super) fn files_prelude(&self) -> String {
        let any = (0..self.group.tasks.len()).any(|i| self.home_script(i).is_some());
        if any {
            FILES_PRELUDE.to_owned()
        } else {
            String::new()
        }
    }

    /// Whether the task's local `workdir` and mounts reach its pods (the
    /// caller took the files), so no warning says they do not.
    pub(super) fn delivers(&self) -> bool {
        self.files().is_some()
    }

    /// The manifests' ConfigMap of streams (`skyc build`), or a located
    /// error when they do not fit in one.
    pub(super) fn files_config_map(&mut self) -> Option<Value> {
        let files = self.files()?;
        if !files.any() {
            return None;
        }
        let mut data = Map::new();
        let mut size = 0;
        let mut counted = std::collections::BTreeSet::new();
        for digest in files.tasks.iter().flatten().map(|m| &m.taken.digest) {
            let Some(pack) = files.packs.get(digest) else {
                continue;
            };
            let key = format!("{digest}.tar");
            if !counted.insert(key.clone()) {
                continue;
            }
            // Base64's size, whether the bytes were read or not.
            size += key.len() + pack.bytes.div_ceil(3) as usize * 4;
            if let Some(bytes) = &pack.data {
                data.insert(
                    key,
                    json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
                );
            }
        }
        if size > MAX_CONFIG_MAP_BYTES {
            let at = self.largest_mount();
            self.push(
                Diagnostic::new(
                    Rule::K8sTooLarge,
                    at,
                    format!(
                        "the {}'s files take {size} bytes in a ConfigMap, which holds at most {MAX_CONFIG_MAP_BYTES}",
                        self.what()
                    ),
                )
                .label("the largest of them")
                .severity(Severity::Error)
                .help("`skyc run --target k8s` sends them to the pods through a files pod of the group, whatever their size; for kubectl, bake them into the image or put them in a volume"),
            );
            return None;
        }
        Some(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(&names::files(&self.group.name), self.options, json!({"skyc.io/group": self.group.name})),
            "binaryData": data,
        }))
    }

    /// Where the largest snapshot is named in the source.
    fn largest_mount(&self) -> Span {
        let Some(files) = self.files() else {
            return self.group_span();
        };
        let mut best: Option<(u64, Span)> = None;
        for (task, mounts) in self.group.tasks.iter().zip(&files.tasks) {
            for m in mounts {
                let at = if m.workdir {
                    match &task.workdir {
                        Some(Workdir::Local { at, .. }) => at.0,
                        _ => task.name_span,
                    }
                } else {
                    task.file_mounts
                        .iter()
                        .find(|f| f.destination == m.destination)
                        .map_or(task.name_span, |f| f.at.0)
                };
                let bytes = files.packs.get(&m.taken.digest).map_or(0, |p| p.bytes);
                if best.is_none_or(|(b, _)| bytes > b) {
                    best = Some((bytes, at));
                }
            }
        }
        best.map_or_else(|| self.group_span(), |(_, at)| at)
    }
}

/// The files pod of the runtime's layout: it serves the group's streams
/// (BusyBox's `httpd`) from an `emptyDir` the runtime fills over
/// `pods/exec`, under the key of the group's Secret, at
/// `skyc-files.{group}` through the JobSet's headless Service.
pub fn files_pod(group: &str, options: &Options) -> Value {
    let mut labels = Map::new();
    labels.insert("skyc.io/group".into(), json!(group));
    labels.insert(super::pods::JOBSET_NAME_LABEL.into(), json!(group));
    labels.insert("skyc.io/role".into(), json!(FILES_ROLE));
    let mut meta = metadata(&names::files(group), options, Value::Object(labels));
    meta["annotations"] = json!({});
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "hostname": FILES_HOST,
            "subdomain": group,
            "restartPolicy": "Always",
            "enableServiceLinks": false,
            // It needs no API access, and `httpd` as PID 1 ends on SIGKILL.
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": CONTAINER,
                "image": options.files_image,
                "command": ["httpd", "-f", "-p", FILES_PORT.to_string(), "-h", SERVED_DIR],
                "env": [{
                    "name": KEY_VAR,
                    "valueFrom": {"secretKeyRef": {"name": names::files(group), "key": KEY}},
                }],
                "ports": [{"containerPort": FILES_PORT}],
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"memory": "256Mi"},
                },
                "volumeMounts": [{"name": FILES_VOLUME, "mountPath": SERVED_DIR}],
            }],
            "volumes": [{"name": FILES_VOLUME, "emptyDir": {}}],
        },
    })
}

/// The Secret of the key the files pod serves the streams under.
pub fn key_secret(group: &str, options: &Options, key: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(&names::files(group), options, json!({"skyc.io/group": group})),
        "type": "Opaque",
        "stringData": {KEY: key},
    })
}

/// What the runtime runs in the files pod to write part of a stream:
/// `sh -c FILL_PART sh DIGEST MIB BYTES` with the `BYTES` bytes from MiB
/// `MIB` on as input. Exactly that many are read: the API server's exec
/// does not end the input. Each part lands at its offset, so a part
/// sent twice changes nothing; the first truncates.
pub const FILL_PART: &str = r#"set -eu
d="/files/$SKYC_FILES_KEY"
mkdir -p "$d"
if [ "$2" = 0 ]; then
  head -c "$3" | dd of="$d/$1.part" bs=1048576 2>/dev/null
else
  head -c "$3" | dd of="$d/$1.part" bs=1048576 seek="$2" conv=notrunc 2>/dev/null
fi
"#;

/// First, `sh -c FILL_HAVE sh DIGEST`: what the pod already has of a
/// stream, so that a fill cut short goes on where it was: `done` when it
/// is served, else the bytes of its part file (0 when none).
pub const FILL_HAVE: &str = r#"set -eu
d="/files/$SKYC_FILES_KEY"
if [ -e "$d/$1.tar" ]; then
  echo done
elif [ -e "$d/$1.part" ]; then
  wc -c <"$d/$1.part"
else
  echo 0
fi
"#;

/// Then `sh -c FILL_DONE sh DIGEST SHA256`: the stream is served once
/// its bytes are the submitted ones.
pub const FILL_DONE: &str = r#"set -eu
d="/files/$SKYC_FILES_KEY"
echo "$2  $d/$1.part" | sha256sum -c >/dev/null
mv "$d/$1.part" "$d/$1.tar"
"#;

/// The init container of the runtime's layout: [`UNPACK`], then this;
/// `fetch DIGEST SHA256 I` lines follow.
const FETCH: &str = r#"fetch() {
  tries=0
  until wget -q -Y off -O "$files/.part" "http://skyc-files.@GROUP@:8080/$SKYC_FILES_KEY/$1.tar"; do
    tries=$((tries + 1))
    if [ "$tries" -ge 150 ]; then
      echo "skyc: the files $1 could not be fetched from skyc-files.@GROUP@" >&2
      exit 75
    fi
    sleep 2
  done
  unpack "$files/.part" "$2" "$3"
  rm -f "$files/.part"
}
"#;

/// The init container of the manifests for kubectl: `unpack PATH SHA256 I`
/// lines follow.
const UNPACK: &str = r#"set -eu
files=/skyc-files
unpack() {
  if ! echo "$2  $1" | sha256sum -c >/dev/null; then
    echo "skyc: $1 is not what was submitted" >&2
    exit 1
  fi
  mkdir -p "$files/$3"
  tar -x -f "$1" -C "$files/$3"
}
"#;

/// The entrypoint's placing of the destinations under the home
/// (`skyc_home`: `$1`, the pod's copy, at `$HOME/$2`: a link, or, where
/// the image already has a directory (the home itself, `~`), its entries
/// copied into it, as rsync would), then the task's `{task}.files.sh`.
const FILES_PRELUDE: &str = r#"
# The task's files under the home, and its workdir: the init container
# has put the pod's copies in place.
# shellcheck disable=SC2317 # called by the task's files.sh
skyc_home() {
  local to="${HOME:-/}/$2"
  if [ -z "$2" ]; then
    [ -d "$1" ] && cp -a -- "$1/." "${HOME:-/}/"
    return
  fi
  mkdir -p -- "$(dirname -- "$to")" || return 1
  if [ -d "$to" ] && [ ! -L "$to" ] && [ -d "$1" ]; then
    cp -a -- "$1/." "$to/"
  else
    rm -rf -- "$to" && ln -s -- "$1" "$to"
  fi
}
if [ -f "$dir/$task.files.sh" ]; then
  # shellcheck disable=SC1090 # the task's own, from the ConfigMap
  if ! . "$dir/$task.files.sh"; then
    echo "skyc: the files of $task could not be placed" >&2
    echo setup >/dev/termination-log 2>/dev/null
    exit 1
  fi
fi
"#;
