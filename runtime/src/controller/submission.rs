//! What a client submits to a controller: a group, a pool file applied,
//! or jobs for a pool, as the client would have recorded them in a local
//! store ([`NewGroup`]), sent instead to the controller's, with the
//! snapshots of their files the controller does not hold yet.
//!
//! The client compiles, plans and takes the files where the user's files
//! are; the controller only records, by the same rules as a local store
//! ([`crate::pool::admission`] for pools and their jobs). One stream
//! carries it all, so the controller holds its snapshots' lock from the
//! first byte to the record made, and no collection removes a snapshot in
//! between:
//!
//! ```text
//! {"name":...,"plan":...,"snapshots":[...]}\n     the record, one line
//! snapshot DIGEST dir|file BYTES\n<BYTES of tar>   each snapshot sent
//! end\n
//! ```
//!
//! What the line is ([`Kind`]) is said by the command that reads it
//! (`skyc controller accept [--pool|--jobs]`), so a controller of an
//! older skyc refuses what it cannot record rather than take it for a
//! group.
//!
//! A snapshot is its [`crate::files::tar`] stream, unpacked beside the
//! controller's snapshots and kept only when it reads back to the digest
//! it was sent as: the same bytes, whatever the way.

use crate::files::Snapshots;
use crate::files::source::Budget;
use crate::pool::admission::{self, Applied};
use crate::store::{Backend, NewGroup, NewTask, Store};
use serde::{Deserialize, Serialize};
use skyc_targets::files::TAR_FILE_ENTRY;
use std::io::{self, BufRead, Read, Write};
use std::path::Path;

/// The most a record's line may hold: a plan carries its secrets and its
/// nodes' environments, never gigabytes (jobs: every rank's plan).
const MAX_LINE: u64 = 64 << 20;

/// What a controller admits: records of its target, made its own once
/// all of a stream is here (a plan rewritten for where it runs).
pub struct Admit<F> {
    pub backend: Backend,
    pub admit: F,
}

/// A controller on Kubernetes: its records as the client planned them.
pub fn on_kubernetes() -> Admit<impl FnOnce(&mut Record) -> Result<(), String>> {
    Admit {
        backend: Backend::Kubernetes,
        admit: |_: &mut Record| Ok(()),
    }
}

/// A controller on AWS: a group's plan, or a pool's workers', made its
/// own ([`super::aws::admit`]); a pool's jobs reach its workers as the
/// pool does.
pub fn on_aws(dir: &Path) -> Admit<impl FnOnce(&mut Record) -> Result<(), String> + '_> {
    Admit {
        backend: Backend::Aws,
        admit: move |record: &mut Record| match record {
            Record::Group(group) => {
                group.plan = super::aws::admit(dir, &group.plan)?;
                Ok(())
            }
            Record::Pool(pool) => {
                pool.plan = super::aws::admit_pool(dir, &pool.plan)?;
                Ok(())
            }
            Record::Jobs(_) => Ok(()),
        },
    }
}

/// What a stream's line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Group,
    /// A pool file applied (`skyc pool apply`).
    Pool,
    /// Jobs (`skyc run --pool`).
    Jobs,
}

impl Kind {
    /// The arguments of `skyc controller accept` that say it.
    pub fn args(self) -> &'static [&'static str] {
        match self {
            Kind::Group => &[],
            Kind::Pool => &["--pool"],
            Kind::Jobs => &["--jobs"],
        }
    }
}

/// A stream's line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Group(Submission),
    Pool(Submission),
    Jobs(Jobs),
}

/// Jobs planned together, in rank order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jobs {
    /// The pool they were planned against (its id and name).
    pub pool: Option<(i64, String)>,
    pub num_jobs: u32,
    pub jobs: Vec<Submission>,
}

/// What a controller recorded, as it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Accepted {
    Group(i64),
    Pool(Applied),
    Jobs(Vec<i64>),
}

impl Accepted {
    /// The answer's line: the group's id, `created|updated ID`, the jobs'
    /// ids.
    pub fn answer(&self) -> String {
        match self {
            Accepted::Group(id) => id.to_string(),
            Accepted::Pool(applied) => applied.answer(),
            Accepted::Jobs(ids) => ids.iter().map(i64::to_string).collect::<Vec<_>>().join(" "),
        }
    }

    /// An answer of `kind` read back.
    pub fn parse(kind: Kind, s: &str) -> Option<Self> {
        let s = s.trim();
        match kind {
            Kind::Group => s.parse().ok().map(Accepted::Group),
            Kind::Pool => Applied::parse(s).map(Accepted::Pool),
            Kind::Jobs => s
                .split_whitespace()
                .map(|id| id.parse().ok())
                .collect::<Option<Vec<i64>>>()
                .filter(|ids| !ids.is_empty())
                .map(Accepted::Jobs),
        }
    }
}

impl Record {
    pub fn kind(&self) -> Kind {
        match self {
            Record::Group(_) => Kind::Group,
            Record::Pool(_) => Kind::Pool,
            Record::Jobs(_) => Kind::Jobs,
        }
    }

    fn submissions(&self) -> &[Submission] {
        match self {
            Record::Group(s) | Record::Pool(s) => std::slice::from_ref(s),
            Record::Jobs(jobs) => &jobs.jobs,
        }
    }

    /// The snapshots it names, each once.
    pub fn snapshots(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .submissions()
            .iter()
            .flat_map(|s| s.snapshots.iter().cloned())
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// Writes the stream: the line, then the snapshots `sending` of the
    /// client's `snapshots`.
    pub fn write(
        &self,
        snapshots: &Snapshots,
        sending: &[String],
        mut out: impl Write,
    ) -> io::Result<()> {
        match self {
            Record::Group(s) | Record::Pool(s) => serde_json::to_writer(&mut out, s)?,
            Record::Jobs(jobs) => serde_json::to_writer(&mut out, jobs)?,
        }
        out.write_all(b"\n")?;
        for digest in sending {
            let path = snapshots.path(digest);
            let kind = if std::fs::symlink_metadata(&path)?.is_dir() {
                "dir"
            } else {
                "file"
            };
            // Written twice (sized, then sent) rather than held: a
            // snapshot may be larger than memory should be.
            let (_, bytes) = crate::files::tar::digest(&path)?;
            writeln!(out, "snapshot {digest} {kind} {bytes}")?;
            crate::files::tar::write(&path, &mut out)?;
        }
        out.write_all(b"end\n")?;
        out.flush()
    }

    fn read(kind: Kind, line: &[u8]) -> Result<Self, String> {
        let what = match kind {
            Kind::Group => "group's",
            Kind::Pool => "pool's",
            Kind::Jobs => "jobs'",
        };
        let failed = |e: serde_json::Error| format!("the {what} line: {e}");
        Ok(match kind {
            Kind::Group => Record::Group(serde_json::from_slice(line).map_err(failed)?),
            Kind::Pool => Record::Pool(serde_json::from_slice(line).map_err(failed)?),
            Kind::Jobs => Record::Jobs(serde_json::from_slice(line).map_err(failed)?),
        })
    }

    /// Refused before anything is sent when its line is longer than a
    /// controller reads.
    pub fn check_size(&self) -> Result<(), String> {
        let bytes = match self {
            Record::Group(s) | Record::Pool(s) => serde_json::to_vec(s),
            Record::Jobs(jobs) => serde_json::to_vec(jobs),
        }
        .map_err(|e| e.to_string())?
        .len() as u64;
        if bytes < MAX_LINE {
            return Ok(());
        }
        let what = match self {
            Record::Jobs(jobs) => format!("the plans of {} jobs", jobs.jobs.len()),
            _ => "its plan".to_owned(),
        };
        Err(format!(
            "{what} take {} MiB, more than a controller reads at once ({} MiB): submit fewer \
             jobs at a time",
            bytes >> 20,
            MAX_LINE >> 20
        ))
    }

    /// Records it in the store of `dir`, by the rules a local store's
    /// are.
    fn record(&self, dir: &Path) -> Result<Accepted, String> {
        let mut store = Store::open(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let store = &mut store;
        match self {
            Record::Group(s) => store
                .insert_group(&s.as_new())
                .map(Accepted::Group)
                .map_err(|e| format!("{}: {e}", dir.display())),
            Record::Pool(s) => admission::apply(store, &s.as_new()).map(Accepted::Pool),
            // Without a pool they run on the submitting machine.
            Record::Jobs(Jobs { pool: None, .. }) => {
                Err("jobs without a pool do not run on a controller".into())
            }
            Record::Jobs(jobs) => {
                let pool = jobs.pool.as_ref().map(|(id, name)| (*id, name.as_str()));
                let new = jobs.jobs.iter().map(Submission::as_new).collect();
                admission::record_jobs(store, pool, jobs.num_jobs, new).map(Accepted::Jobs)
            }
        }
    }
}

/// A group (a pool, a job) as the client planned it ([`NewGroup`], owned).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    pub name: String,
    pub source: String,
    pub submitted_at_ms: i64,
    pub plan: String,
    pub backend: Backend,
    pub tasks: Vec<Task>,
    pub snapshots: Vec<String>,
    pub buckets: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub name: String,
    pub primary: bool,
    pub num_nodes: u32,
}

impl Submission {
    pub fn of(new: &NewGroup<'_>) -> Self {
        Self {
            name: new.name.to_owned(),
            source: new.source.to_owned(),
            submitted_at_ms: new.submitted_at_ms,
            plan: new.plan.to_owned(),
            backend: new.backend,
            tasks: new
                .tasks
                .iter()
                .map(|t| Task {
                    name: t.name.to_owned(),
                    primary: t.primary,
                    num_nodes: t.num_nodes,
                })
                .collect(),
            snapshots: new.snapshots.to_vec(),
            buckets: new.buckets.to_vec(),
        }
    }

    fn as_new(&self) -> NewGroup<'_> {
        NewGroup {
            name: &self.name,
            source: &self.source,
            submitted_at_ms: self.submitted_at_ms,
            plan: &self.plan,
            backend: self.backend,
            tasks: self
                .tasks
                .iter()
                .map(|t| NewTask {
                    name: &t.name,
                    primary: t.primary,
                    num_nodes: t.num_nodes,
                })
                .collect(),
            snapshots: &self.snapshots,
            buckets: &self.buckets,
        }
    }
}

/// Which of `digests` the state directory `dir` does not hold; an error
/// when it could not keep them: said before anything is sent, since a
/// command that stops reading in the middle of a stream may have its
/// answer lost with the connection.
pub fn missing(dir: &Path, digests: &[String]) -> Result<Vec<String>, String> {
    let snapshots = Snapshots::of(dir);
    snapshots
        .writing()
        .map_err(|e| format!("{}: {e}", snapshots.dir().display()))?;
    Ok(held_not(&snapshots, digests))
}

fn held_not(snapshots: &Snapshots, digests: &[String]) -> Vec<String> {
    digests
        .iter()
        .filter(|d| !is_digest(d) || snapshots.path(d).symlink_metadata().is_err())
        .cloned()
        .collect()
}

/// A snapshot's name: what [`Snapshots`] names one by, and nothing that
/// reaches outside its directory.
fn is_digest(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Records what the stream `input` carries (a line of `kind`) in the
/// state directory `dir`, keeping the snapshots it brings; answers what
/// was recorded. The controller's supervisor is told; none is started (a
/// controller's replica that does not lead does not supervise).
pub fn accept(
    dir: &Path,
    mut input: impl BufRead,
    kind: Kind,
    admit: Admit<impl FnOnce(&mut Record) -> Result<(), String>>,
) -> Result<Accepted, String> {
    let mut line = Vec::new();
    (&mut input)
        .take(MAX_LINE)
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("reading the record: {e}"))?;
    if line.last() != Some(&b'\n') {
        return Err("the record's line ended early or is too long".into());
    }
    let mut record = Record::read(kind, &line)?;
    // A controller supervises what runs where it does.
    if let Some(other) = record
        .submissions()
        .iter()
        .find(|s| s.backend != admit.backend)
    {
        return Err(format!(
            "a controller on {} runs groups of --target {}, not {}",
            admit.backend.descriptor().title,
            admit.backend.as_str(),
            other.backend.as_str()
        ));
    }
    let snapshots = Snapshots::of(dir);
    let writing = snapshots
        .writing()
        .map_err(|e| format!("{}: {e}", snapshots.dir().display()))?;
    loop {
        line.clear();
        (&mut input)
            .take(1024)
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("reading the snapshots: {e}"))?;
        if line.is_empty() {
            return Err("the stream ended early: submit again".into());
        }
        let text = String::from_utf8_lossy(&line);
        let words: Vec<&str> = text.split_whitespace().collect();
        match words.as_slice() {
            ["end"] => break,
            ["snapshot", digest, kind @ ("dir" | "file"), bytes] if is_digest(digest) => {
                let bytes: u64 = bytes
                    .parse()
                    .map_err(|_| format!("snapshot {digest}: `{bytes}` is not a size"))?;
                receive(
                    &snapshots,
                    &writing,
                    digest,
                    *kind == "dir",
                    (&mut input).take(bytes),
                )?;
            }
            _ => return Err(format!("unexpected in the stream: `{}`", text.trim_end())),
        }
    }
    let gone = held_not(&snapshots, &record.snapshots());
    if !gone.is_empty() {
        return Err(format!(
            "snapshot{} {} not held here: submit again",
            if gone.len() == 1 { "" } else { "s" },
            gone.join(", ")
        ));
    }
    // Made the controller's once all of it is here: nothing of a stream
    // refused is kept.
    (admit.admit)(&mut record)?;
    let accepted = record.record(dir)?;
    drop(writing);
    // A replica that does not lead has no supervisor listening: the
    // leader's next scan of the store takes the record on.
    let _ = crate::supervisor::poke(dir);
    Ok(accepted)
}

/// A budget without a limit: what arrives was within the client's.
fn unlimited(progress: &mut dyn FnMut(u64, u64)) -> Budget<'_> {
    Budget {
        limit: u64::MAX,
        files: 0,
        bytes: 0,
        progress,
    }
}

/// Unpacks one snapshot's stream beside `snapshots` and keeps it, if it
/// reads back to `digest`.
fn receive(
    snapshots: &Snapshots,
    writing: &crate::files::store::Writing,
    digest: &str,
    dir: bool,
    mut stream: impl Read,
) -> Result<(), String> {
    let failed = |e: &dyn std::fmt::Display| format!("snapshot {digest}: {e}");
    let staged = snapshots.staging(writing).map_err(|e| failed(&e))?;
    let unpacked = (|| -> io::Result<std::path::PathBuf> {
        let mut archive = tar::Archive::new(&mut stream);
        archive.set_preserve_permissions(true);
        archive.set_overwrite(false);
        archive.unpack(&staged)?;
        // The rest of the frame, if the archive ended before it.
        io::copy(&mut stream, &mut io::sink())?;
        if dir {
            return Ok(staged.clone());
        }
        // One file: the stream's only entry, taken out of its directory.
        let file = staged.with_extension("file");
        std::fs::rename(staged.join(TAR_FILE_ENTRY), &file)?;
        crate::files::store::remove(&staged);
        Ok(file)
    })();
    let unpacked = match unpacked {
        Ok(path) => path,
        Err(e) => {
            crate::files::store::remove(&staged);
            return Err(failed(&e));
        }
    };
    let (mut quiet, mut quieter) = (|_, _| {}, |_, _| {});
    // Read before it is kept: what does not read back to its digest is
    // removed, never kept under another.
    let arrived = crate::files::source::read_tree(
        &unpacked,
        dir,
        None,
        &mut unlimited(&mut quiet),
        crate::files::source::Filters::All,
    )
    .map(|t| t.digest);
    if arrived.as_deref().ok() != Some(digest) {
        crate::files::store::remove(&unpacked);
        return Err(failed(&match arrived {
            Ok(other) => format!("arrived as {other} (damaged on the way, or not skyc's stream)"),
            Err(e) => format!("{e:?}"),
        }));
    }
    snapshots
        .keep(writing, &unpacked, dir, &mut unlimited(&mut quieter))
        .map_err(|e| failed(&format!("{e:?}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::source::Filters;
    use std::path::PathBuf;

    struct Dirs {
        root: PathBuf,
        client: PathBuf,
        controller: PathBuf,
    }

    impl Dirs {
        fn new(name: &str) -> Self {
            let root =
                std::env::temp_dir().join(format!("skyc-submission-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            let (client, controller) = (root.join("client"), root.join("controller"));
            std::fs::create_dir_all(root.join("src/sub")).unwrap();
            std::fs::create_dir_all(&client).unwrap();
            std::fs::create_dir_all(&controller).unwrap();
            std::fs::write(root.join("src/run.sh"), "echo hi\n").unwrap();
            std::fs::write(root.join("src/sub/data.bin"), [0u8, 1, 2, 255]).unwrap();
            std::fs::write(root.join("one.txt"), "one file\n").unwrap();
            Self {
                root,
                client,
                controller,
            }
        }

        /// `source` taken into the client's snapshots: its digest.
        fn take(&self, source: &str, dir: bool) -> String {
            let snapshots = Snapshots::of(&self.client);
            let writing = snapshots.writing().unwrap();
            let mut quiet = |_, _| {};
            let mut budget = Budget {
                limit: u64::MAX,
                files: 0,
                bytes: 0,
                progress: &mut quiet,
            };
            snapshots
                .take(
                    &writing,
                    &self.root.join(source),
                    dir,
                    Filters::All,
                    &mut budget,
                )
                .unwrap()
                .digest
        }

        fn stream(&self, snapshots: &[String], sending: &[String]) -> Vec<u8> {
            let submission = Record::Group(Submission {
                name: "g".into(),
                source: "g.yaml".into(),
                submitted_at_ms: 1,
                plan: "{}".into(),
                backend: Backend::Kubernetes,
                tasks: vec![Task {
                    name: "a".into(),
                    primary: true,
                    num_nodes: 2,
                }],
                snapshots: snapshots.to_vec(),
                buckets: Vec::new(),
            });
            let mut out = Vec::new();
            submission
                .write(&Snapshots::of(&self.client), sending, &mut out)
                .unwrap();
            out
        }

        fn groups(&self) -> usize {
            Store::open(&self.controller)
                .unwrap()
                .groups()
                .unwrap()
                .len()
        }
    }

    impl Drop for Dirs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    /// A tree and a single file arrive as the same bytes, under the same
    /// digests, and the group is recorded with them; what the controller
    /// holds is not asked for again.
    #[test]
    fn snapshots_arrive_whole_and_are_sent_once() {
        let d = Dirs::new("whole");
        let (tree, file) = (d.take("src", true), d.take("one.txt", false));
        let both = [tree.clone(), file.clone()];
        assert_eq!(missing(&d.controller, &both).unwrap(), both);
        let Accepted::Group(gid) = accept(
            &d.controller,
            &d.stream(&both, &both)[..],
            Kind::Group,
            on_kubernetes(),
        )
        .unwrap() else {
            panic!("a group")
        };
        let kept = Snapshots::of(&d.controller);
        assert_eq!(
            std::fs::read(kept.path(&tree).join("sub/data.bin")).unwrap(),
            [0, 1, 2, 255]
        );
        assert_eq!(
            std::fs::read_to_string(kept.path(&tree).join("run.sh")).unwrap(),
            "echo hi\n"
        );
        assert_eq!(
            std::fs::read_to_string(kept.path(&file)).unwrap(),
            "one file\n"
        );
        assert!(missing(&d.controller, &both).unwrap().is_empty());
        let store = Store::open(&d.controller).unwrap();
        let group = store.group(gid).unwrap().unwrap();
        assert_eq!(group.name, "g");
        assert_eq!(store.tasks(gid).unwrap()[0].num_nodes, 2);
        // Again, sending nothing: recorded on what is held.
        accept(
            &d.controller,
            &d.stream(&both, &[])[..],
            Kind::Group,
            on_kubernetes(),
        )
        .unwrap();
        assert_eq!(d.groups(), 2);
    }

    /// A snapshot damaged on the way, one not sent nor held, a stream cut
    /// short and names that reach outside the snapshots are refused, and
    /// nothing is recorded.
    #[test]
    fn what_does_not_arrive_whole_is_refused() {
        let d = Dirs::new("refused");
        let tree = d.take("src", true);
        let mut damaged = d.stream(std::slice::from_ref(&tree), std::slice::from_ref(&tree));
        let at = damaged
            .windows(8)
            .position(|w| w == b"echo hi\n")
            .expect("the file's bytes in the stream");
        damaged[at] = b'E';
        let refused =
            accept(&d.controller, &damaged[..], Kind::Group, on_kubernetes()).unwrap_err();
        assert!(refused.contains("damaged"), "{refused}");
        let kept: Vec<_> = std::fs::read_dir(Snapshots::of(&d.controller).dir())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n != ".lock")
            .collect();
        assert!(kept.is_empty(), "nothing kept of it: {kept:?}");
        let refused = accept(
            &d.controller,
            &d.stream(std::slice::from_ref(&tree), &[])[..],
            Kind::Group,
            on_kubernetes(),
        )
        .unwrap_err();
        assert!(refused.contains("not held here"), "{refused}");
        let whole = d.stream(std::slice::from_ref(&tree), std::slice::from_ref(&tree));
        let refused = accept(
            &d.controller,
            &whole[..whole.len() - 4],
            Kind::Group,
            on_kubernetes(),
        )
        .unwrap_err();
        assert!(refused.contains("ended early"), "{refused}");
        let outside = b"{\"name\":\"g\",\"source\":\"s\",\"submitted_at_ms\":1,\"plan\":\"{}\",\
            \"backend\":\"k8s\",\"tasks\":[],\"snapshots\":[],\"buckets\":[]}\n\
            snapshot ../../etc dir 0\nend\n";
        let refused =
            accept(&d.controller, &outside[..], Kind::Group, on_kubernetes()).unwrap_err();
        assert!(refused.contains("unexpected"), "{refused}");
        assert_eq!(missing(&d.controller, &["../x".into()]).unwrap(), ["../x"]);
        assert_eq!(d.groups(), 0);
    }

    fn submission(name: &str, plan: String) -> Submission {
        Submission {
            name: name.into(),
            source: format!("{name}.yaml"),
            submitted_at_ms: 1,
            plan,
            backend: Backend::Kubernetes,
            tasks: Vec::new(),
            snapshots: Vec::new(),
            buckets: Vec::new(),
        }
    }

    fn pool_plan(workers: u32) -> String {
        serde_json::to_string(&crate::pool::PoolPlan {
            pool: crate::pool::PoolSpec {
                scaling: crate::pool::Scaling::Fixed { workers },
                nodes: 1,
                offer: crate::pool::Room {
                    cpus: 4.0,
                    memory_gb: 16.0,
                    gpus: 0.0,
                },
                worker_key: "k".into(),
            },
            worker: serde_json::json!({}),
        })
        .unwrap()
    }

    fn send(d: &Dirs, record: &Record) -> Result<Accepted, String> {
        let mut stream = Vec::new();
        record
            .write(&Snapshots::of(&d.client), &[], &mut stream)
            .unwrap();
        let answer = accept(&d.controller, &stream[..], record.kind(), on_kubernetes())?;
        // What the client reads back is what was recorded.
        assert_eq!(
            Accepted::parse(record.kind(), &answer.answer()),
            Some(answer.clone())
        );
        Ok(answer)
    }

    /// A pool file is recorded as a local `pool apply` records it (made,
    /// then given the new plan); jobs are recorded ranked on the pool they
    /// were planned against, and refused once it is not that pool.
    #[test]
    fn pools_and_their_jobs_are_recorded_by_the_local_rules() {
        let d = Dirs::new("pools");
        let made = send(&d, &Record::Pool(submission("p", pool_plan(2)))).unwrap();
        let Accepted::Pool(Applied::Created(pool)) = made else {
            panic!("{made:?}")
        };
        let again = send(&d, &Record::Pool(submission("p", pool_plan(3)))).unwrap();
        assert_eq!(again, Accepted::Pool(Applied::Updated(pool)));
        let store = Store::open(&d.controller).unwrap();
        let request = store.group(pool).unwrap().unwrap();
        assert_eq!(request.name, "p");
        let found = admission::for_jobs(&store, "p").unwrap();
        assert_eq!(found.id, pool);
        let jobs = |pool: Option<(i64, String)>| {
            Record::Jobs(Jobs {
                pool,
                num_jobs: 2,
                jobs: vec![submission("j", "{}".into()), submission("j", "{}".into())],
            })
        };
        let Accepted::Jobs(ids) = send(&d, &jobs(Some((pool, "p".into())))).unwrap() else {
            panic!("jobs")
        };
        let ranks: Vec<(Option<i64>, Option<i64>)> = ids
            .iter()
            .map(|id| {
                let g = store.group(*id).unwrap().unwrap();
                (g.pool, g.rank)
            })
            .collect();
        assert_eq!(ranks, [(Some(pool), Some(0)), (Some(pool), Some(1))]);
        // Planned against a pool that is no longer the live one of its
        // name, or none: refused, nothing recorded.
        let stale = send(&d, &jobs(Some((pool + 100, "p".into())))).unwrap_err();
        assert!(stale.contains("was replaced"), "{stale}");
        let none = send(&d, &jobs(Some((pool, "q".into())))).unwrap_err();
        assert!(none.contains("no pool named `q`"), "{none}");
        // A line of another kind than the command says is refused.
        let mut stream = Vec::new();
        jobs(None)
            .write(&Snapshots::of(&d.client), &[], &mut stream)
            .unwrap();
        let wrong = accept(&d.controller, &stream[..], Kind::Pool, on_kubernetes()).unwrap_err();
        assert!(wrong.contains("the pool's line"), "{wrong}");
        assert_eq!(
            d.groups(),
            2,
            "the jobs planned against the live pool, only"
        );
        // Jobs without a pool run on the submitting machine, never here.
        let alone = send(&d, &jobs(None)).unwrap_err();
        assert!(alone.contains("without a pool"), "{alone}");
        // A pool going down takes no more jobs and no new plan.
        let mut store = Store::open(&d.controller).unwrap();
        store.request_cancel(pool).unwrap();
        let late = send(&d, &jobs(Some((pool, "p".into())))).unwrap_err();
        assert!(late.contains("going down"), "{late}");
        let again = send(&d, &Record::Pool(submission("p", pool_plan(1)))).unwrap_err();
        assert!(again.contains("going down"), "{again}");
        // Nor does one that runs elsewhere.
        let mut aws = submission("p", pool_plan(1));
        aws.backend = Backend::Aws;
        let elsewhere = send(&d, &Record::Pool(aws)).unwrap_err();
        assert!(
            elsewhere.contains("runs groups of --target k8s"),
            "{elsewhere}"
        );
        assert_eq!(d.groups(), 2, "nothing more recorded");
    }
}
