//! The configuration and the choice of source, pure: environments and
//! files given as maps. Getting credentials from each source is tested
//! against moto and stand-ins in `aws/tests/credentials.rs`.

use super::chain::{Base, Role};
use super::*;
use std::collections::BTreeMap;

const HOME: (&str, &str) = ("HOME", "/home/u");

fn resolve(env: &[(&str, &str)], files: &[(&str, &str)]) -> Result<(Access, Chain), ConfigError> {
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(k, v)| (PathBuf::from(k), (*v).to_owned()))
        .collect();
    Access::resolve(&|k| env.get(k).cloned(), &|p| Ok(files.get(p).cloned()))
}

fn keys(id: &str, secret: &str, token: Option<&str>) -> Credentials {
    Credentials {
        access_key_id: id.into(),
        secret_access_key: secret.into(),
        session_token: token.map(Into::into),
    }
}

const NO_IMDS: (&str, &str) = ("AWS_EC2_METADATA_DISABLED", "true");

#[test]
fn environment_credentials_win() {
    let (a, c) = resolve(
        &[
            HOME,
            ("AWS_ACCESS_KEY_ID", "AKENV"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", "tok"),
            ("AWS_REGION", "eu-west-1"),
        ],
        &[(
            "/home/u/.aws/credentials",
            "[default]\naws_access_key_id = AKFILE\naws_secret_access_key = s2\n",
        )],
    )
    .unwrap();
    assert_eq!(a.source, Source::Environment);
    assert_eq!(
        c.0.base,
        Base::Keys {
            credentials: keys("AKENV", "secret", Some("tok")),
            from: ENVIRONMENT.into()
        }
    );
    assert_eq!(a.region.as_deref(), Some("eu-west-1"));
    assert_eq!(a.endpoint, None);
    assert_eq!(a.config_file, PathBuf::from("/home/u/.aws/config"));
}

#[test]
fn profiles_region_and_endpoints_from_the_shared_files() {
    let config = "\
[default]
region = us-east-1

[profile team]
region = us-west-2
services = local
# a comment
; another

[services local]
ec2 =
  endpoint_url = http://127.0.0.1:5000
s3 =
  endpoint_url = http://127.0.0.1:9000
";
    let creds = "[team]\naws_access_key_id = AKTEAM\naws_secret_access_key = s\n";
    let files = [
        ("/home/u/.aws/config", config),
        ("/home/u/.aws/credentials", creds),
    ];
    let (a, c) = resolve(&[HOME, ("AWS_PROFILE", "team")], &files).unwrap();
    assert_eq!(a.profile, "team");
    assert_eq!(a.source, Source::Profile);
    assert_eq!(
        c.0.base,
        Base::Keys {
            credentials: keys("AKTEAM", "s", None),
            from: "/home/u/.aws/credentials [team]".into()
        }
    );
    assert_eq!(c.describe(), "the keys in /home/u/.aws/credentials [team]");
    assert_eq!(a.region.as_deref(), Some("us-west-2"));
    assert_eq!(a.endpoint.as_deref(), Some("http://127.0.0.1:5000"));
    // The environment's endpoints come first, the EC2 one before the
    // global one; and the region variables before the profile's.
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut env = vec![HOME, ("AWS_PROFILE", "team")];
        env.extend_from_slice(extra);
        resolve(&env, &files).unwrap().0
    };
    let a = with(&[
        ("AWS_ENDPOINT_URL", "http://global"),
        ("AWS_DEFAULT_REGION", "ap-south-1"),
    ]);
    assert_eq!(a.endpoint.as_deref(), Some("http://global"));
    assert_eq!(a.region.as_deref(), Some("ap-south-1"));
    let a = with(&[
        ("AWS_ENDPOINT_URL", "http://global"),
        ("AWS_ENDPOINT_URL_EC2", "http://ec2"),
    ]);
    assert_eq!(a.endpoint.as_deref(), Some("http://ec2"));
    let a = with(&[
        ("AWS_ENDPOINT_URL", "http://global"),
        ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"),
    ]);
    assert_eq!(a.endpoint, None);
    // The default profile has no credentials anywhere.
    assert_eq!(
        resolve(&[HOME, NO_IMDS], &files).unwrap_err(),
        ConfigError::NoCredentials {
            profile: "default".into()
        }
    );
}

#[test]
fn files_named_by_the_environment_and_credentials_in_config() {
    let (a, c) = resolve(
        &[
            HOME,
            ("AWS_CONFIG_FILE", "/etc/aws.conf"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nowhere"),
        ],
        &[(
            "/etc/aws.conf",
            "[default]\naws_access_key_id=AK\naws_secret_access_key=S\nendpoint_url=http://x:1\n",
        )],
    )
    .unwrap();
    assert_eq!(c.describe(), "the keys in /etc/aws.conf [default]");
    assert_eq!(a.endpoint.as_deref(), Some("http://x:1"));
    assert_eq!(a.region, None);
    assert_eq!(a.config_file, PathBuf::from("/etc/aws.conf"));
    assert_eq!(a.credentials_file, PathBuf::from("/nowhere"));
}

#[test]
fn roles_assumed_from_source_profiles_with_their_settings() {
    let config = "\
[profile base]
aws_access_key_id = AKBASE
aws_secret_access_key = sb

[profile admin]
role_arn = arn:aws:iam::111111111111:role/admin
source_profile = base
external_id = ext-1
role_session_name = me
duration_seconds = 7200
region = eu-central-1

[profile deep]
role_arn = arn:aws:iam::222222222222:role/deep
source_profile = admin

[profile self]
role_arn = arn:aws:iam::333333333333:role/self
source_profile = self
aws_access_key_id = AKSELF
aws_secret_access_key = ss

[profile keyed-source]
role_arn = arn:aws:iam::444444444444:role/k
source_profile = keyed

[profile keyed]
aws_access_key_id = AKKEYED
aws_secret_access_key = sk
role_arn = arn:aws:iam::555555555555:role/ignored
source_profile = base

[profile on-ec2]
role_arn = arn:aws:iam::666666666666:role/x
credential_source = Ec2InstanceMetadata
";
    let files = [("/home/u/.aws/config", config)];
    let chain = |p: &str| resolve(&[HOME, ("AWS_PROFILE", p)], &files).unwrap().1.0;
    let admin = Role {
        profile: "admin".into(),
        arn: "arn:aws:iam::111111111111:role/admin".into(),
        external_id: Some("ext-1".into()),
        session_name: Some("me".into()),
        duration_seconds: Some(7200),
        region: Some("eu-central-1".into()),
    };
    let base = Base::Keys {
        credentials: keys("AKBASE", "sb", None),
        from: "/home/u/.aws/config [profile base]".into(),
    };
    assert_eq!(
        chain("admin"),
        chain::Chain {
            base: base.clone(),
            roles: vec![admin.clone()]
        }
    );
    // Chained: base's keys, then admin, then deep with admin's.
    let deep = chain("deep");
    assert_eq!(deep.base, base);
    assert_eq!(deep.roles.len(), 2);
    assert_eq!(deep.roles[0], admin);
    assert_eq!(deep.roles[1].arn, "arn:aws:iam::222222222222:role/deep");
    assert_eq!(deep.roles[1].duration_seconds, None);
    assert_eq!(
        deep.describe(),
        "role arn:aws:iam::222222222222:role/deep of profile `deep`, assumed from the keys \
         in /home/u/.aws/config [profile base]"
    );
    // A profile that is its own source uses its keys for its role.
    let own = chain("self");
    assert_eq!(
        own.base,
        Base::Keys {
            credentials: keys("AKSELF", "ss", None),
            from: "/home/u/.aws/config [profile self]".into()
        }
    );
    assert_eq!(own.roles.len(), 1);
    // A source profile's keys come before its own role.
    let k = chain("keyed-source");
    assert!(
        matches!(&k.base, Base::Keys { credentials, .. } if credentials.access_key_id == "AKKEYED")
    );
    assert_eq!(k.roles.len(), 1);
    // credential_source names where the source credentials are.
    let e = chain("on-ec2");
    assert_eq!(e.base, Base::InstanceMetadata { endpoint: None });
    assert_eq!(e.roles.len(), 1);
}

#[test]
fn a_profiles_role_wins_over_its_keys_and_the_credentials_file_over_config() {
    let (_, c) = resolve(
        &[HOME, ("AWS_PROFILE", "p")],
        &[
            (
                "/home/u/.aws/config",
                "[profile p]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = b\n\
                 [profile b]\naws_access_key_id = AKCONFIG\naws_secret_access_key = x\n",
            ),
            (
                "/home/u/.aws/credentials",
                "[b]\naws_access_key_id = AKCREDS\naws_secret_access_key = y\n\
                 [p]\naws_access_key_id = AKP\naws_secret_access_key = z\n",
            ),
        ],
    )
    .unwrap();
    assert_eq!(c.0.roles.len(), 1);
    assert_eq!(
        c.0.base,
        Base::Keys {
            credentials: keys("AKCREDS", "y", None),
            from: "/home/u/.aws/credentials [b]".into()
        }
    );
}

#[test]
fn sso_process_and_web_identity_profiles() {
    let config = "\
[profile dev]
sso_session = corp
sso_account_id = 123456789012
sso_role_name = Dev
region = us-east-1

[sso-session corp]
sso_start_url = https://corp.awsapps.com/start
sso_region = eu-west-1
sso_registration_scopes = sso:account:access

[profile legacy]
sso_start_url = https://old.awsapps.com/start
sso_region = us-east-2
sso_account_id = 210987654321
sso_role_name = Old

[profile tool]
credential_process = /usr/local/bin/get-creds --json

[profile eks]
role_arn = arn:aws:iam::1:role/pod
web_identity_token_file = /var/run/token
role_session_name = pod
";
    let files = [("/home/u/.aws/config", config)];
    let get = |p: &str| resolve(&[HOME, ("AWS_PROFILE", p)], &files).unwrap();
    let (a, c) = get("dev");
    assert_eq!(a.source, Source::Profile);
    assert_eq!(
        c.0.base,
        Base::Sso {
            profile: "dev".into(),
            start_url: "https://corp.awsapps.com/start".into(),
            region: "eu-west-1".into(),
            account_id: "123456789012".into(),
            role_name: "Dev".into(),
            session: Some("corp".into()),
        }
    );
    assert_eq!(c.renew(), "log in again: aws sso login --sso-session corp");
    let (_, c) = get("legacy");
    assert!(matches!(&c.0.base, Base::Sso { session: None, region, .. } if region == "us-east-2"));
    assert_eq!(c.renew(), "log in again: aws sso login --profile legacy");
    let (_, c) = get("tool");
    assert_eq!(
        c.0.base,
        Base::Process {
            command: "/usr/local/bin/get-creds --json".into(),
            profile: "tool".into()
        }
    );
    let (_, c) = get("eks");
    assert_eq!(
        c.0,
        chain::Chain {
            base: Base::WebIdentity {
                token_file: "/var/run/token".into(),
                role_arn: "arn:aws:iam::1:role/pod".into(),
                session_name: Some("pod".into()),
            },
            roles: vec![]
        }
    );
}

#[test]
fn the_chain_after_the_profile_web_identity_container_then_imds() {
    let web = [
        HOME,
        ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/token"),
        ("AWS_ROLE_ARN", "arn:aws:iam::1:role/eks"),
        (
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "/v2/credentials/x",
        ),
    ];
    let (a, _) = resolve(&web, &[]).unwrap();
    assert_eq!(
        a.source,
        Source::WebIdentity {
            token_file: "/var/run/secrets/token".into(),
            role_arn: "arn:aws:iam::1:role/eks".into(),
            session_name: None
        }
    );
    // A profile with credentials comes before the environment's web
    // identity.
    let (a, _) = resolve(
        &web,
        &[(
            "/home/u/.aws/credentials",
            "[default]\naws_access_key_id = A\naws_secret_access_key = B\n",
        )],
    )
    .unwrap();
    assert_eq!(a.source, Source::Profile);
    let (a, c) = resolve(&[web[0], web[3]], &[]).unwrap();
    assert_eq!((a.source, c.0.base), (Source::Container, Base::Container));
    let (a, _) = resolve(
        &[
            HOME,
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:9"),
        ],
        &[],
    )
    .unwrap();
    assert_eq!(
        a.source,
        Source::InstanceMetadata {
            endpoint: Some("http://127.0.0.1:9".into())
        }
    );
    let (a, _) = resolve(&[HOME], &[]).unwrap();
    assert_eq!(a.source, Source::InstanceMetadata { endpoint: None });
    assert!(matches!(
        resolve(&[HOME, NO_IMDS], &[]),
        Err(ConfigError::NoCredentials { .. })
    ));
}

#[test]
fn clear_refusals() {
    let err = |env: &[(&str, &str)], config: &str| {
        resolve(env, &[("/home/u/.aws/config", config)])
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(&[HOME, ("AWS_ACCESS_KEY_ID", "AK")], ""),
        "AWS credentials in the environment lack AWS_SECRET_ACCESS_KEY"
    );
    assert_eq!(
        err(&[HOME, ("AWS_PROFILE", "nope")], ""),
        "AWS profile `nope` is in neither /home/u/.aws/config nor /home/u/.aws/credentials"
    );
    let p = [HOME, ("AWS_PROFILE", "p")];
    let mfa = err(
        &p,
        "[profile p]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = b\n\
         mfa_serial = arn:aws:iam::1:mfa/me\n[profile b]\naws_access_key_id = A\n\
         aws_secret_access_key = B\n",
    );
    assert!(
        mfa.starts_with("AWS profile `p` assumes its role with an MFA code (mfa_serial arn:aws:iam::1:mfa/me), which the supervisor cannot ask for"),
        "{mfa}"
    );
    assert_eq!(
        err(
            &p,
            "[profile p]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = q\n\
             [profile q]\nrole_arn = arn:aws:iam::1:role/s\nsource_profile = p\n"
        ),
        "AWS profile `q` cannot be followed: source_profile `p` leads back to a profile \
         already followed"
    );
    assert_eq!(
        err(&p, "[profile p]\nrole_arn = arn:aws:iam::1:role/r\n"),
        "AWS profile `p` cannot be followed: role_arn arn:aws:iam::1:role/r needs \
         source_profile or credential_source"
    );
    assert_eq!(
        err(
            &p,
            "[profile p]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = x\n\
             credential_source = Environment\n"
        ),
        "AWS profile `p` cannot be followed: it has both source_profile and \
         credential_source; keep one"
    );
    assert_eq!(
        err(
            &p,
            "[profile p]\nrole_arn = arn:aws:iam::1:role/r\ncredential_source = Laptop\n"
        ),
        "AWS profile `p` cannot be followed: credential_source `Laptop` is none of \
         Environment, Ec2InstanceMetadata, EcsContainer"
    );
    assert_eq!(
        err(
            &p,
            "[profile p]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = gone\n"
        ),
        "AWS profile `p` cannot be followed: source_profile `gone` is in neither \
         /home/u/.aws/config nor /home/u/.aws/credentials"
    );
    assert_eq!(
        err(
            &p,
            "[profile p]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = p\n\
             duration_seconds = 1h\n"
        ),
        "AWS profile `p` cannot be followed: duration_seconds `1h` is not a number of \
         seconds from 900 to 43200"
    );
    assert_eq!(
        err(
            &p,
            "[profile p]\nsso_session = corp\nsso_account_id = 1\nsso_role_name = R\n"
        ),
        "AWS profile `p` cannot be followed: IAM Identity Center needs the section in \
         [sso-session corp] of /home/u/.aws/config"
    );
    assert_eq!(
        err(
            &p,
            "[profile p]\nsso_session = corp\nsso_role_name = R\n\
             [sso-session corp]\nsso_start_url = https://x\nsso_region = us-east-1\n"
        ),
        "AWS profile `p` cannot be followed: IAM Identity Center needs sso_account_id in \
         profile `p`"
    );
    assert!(
        err(&p, "[profile p]\nlogin_session = arn:aws:iam::1:user/me\n")
            .contains("aws configure export-credentials --profile p")
    );
    assert_eq!(
        err(&[HOME, ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t")], ""),
        "AWS credentials in the environment's web identity lack AWS_ROLE_ARN"
    );
    let bad = Access::resolve(&|k| (k == "HOME").then(|| "/h".to_owned()), &|_| {
        Err("permission denied".into())
    })
    .unwrap_err();
    assert_eq!(
        bad.to_string(),
        "cannot read /h/.aws/config: permission denied"
    );
}

/// The supervisor asks the stored source only: never keys it finds
/// first in its own environment, which may be another account's.
#[test]
fn the_supervisor_asks_the_runs_source_again() {
    let creds =
        |key: &str| format!("[team]\naws_access_key_id = {key}\naws_secret_access_key = s\n");
    let (access, _) = resolve(
        &[
            HOME,
            ("AWS_PROFILE", "team"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/run/creds"),
        ],
        &[("/run/creds", &creds("AKOLD"))],
    )
    .unwrap();
    let stored = serde_json::to_string(&access).unwrap();
    assert!(!stored.contains("AKOLD"), "{stored}");
    let access: Access = serde_json::from_str(&stored).unwrap();
    let again = |env: &[(&str, &str)], files: &[(&str, &str)]| {
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let files: BTreeMap<PathBuf, String> = files
            .iter()
            .map(|(k, v)| (PathBuf::from(k), (*v).to_owned()))
            .collect();
        access.again(&|k| env.get(k).cloned(), &|p| Ok(files.get(p).cloned()))
    };
    // The supervisor's environment has other keys, another profile and
    // other files: the run's profile in the run's file is read.
    let other = [
        ("HOME", "/elsewhere"),
        ("AWS_ACCESS_KEY_ID", "AKENV"),
        ("AWS_SECRET_ACCESS_KEY", "x"),
        ("AWS_PROFILE", "default"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/other"),
    ];
    let files = [
        ("/run/creds", creds("AKNEW")),
        (
            "/other",
            "[team]\naws_access_key_id = AKOTHER\naws_secret_access_key = o\n".into(),
        ),
    ];
    let files: Vec<(&str, &str)> = files.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let chain = again(&other, &files).unwrap();
    assert!(
        matches!(&chain.0.base, Base::Keys { credentials, .. } if credentials.access_key_id == "AKNEW")
    );
    // The profile gone from the run's file: an error, not another source.
    let gone = again(&other, &[("/run/creds", "[else]\n")]).unwrap_err();
    assert!(matches!(gone, ConfigError::NoSuchProfile { .. }), "{gone}");
    // A run from the environment's keys: the supervisor's own keys only.
    let (env_access, _) = resolve(
        &[
            HOME,
            ("AWS_ACCESS_KEY_ID", "AK"),
            ("AWS_SECRET_ACCESS_KEY", "S"),
        ],
        &[],
    )
    .unwrap();
    let none = env_access
        .again(&|k| (k == "HOME").then(|| "/h".into()), &|_| Ok(None))
        .unwrap_err();
    assert_eq!(
        none.to_string(),
        "the run's AWS credentials came from the environment (AWS_ACCESS_KEY_ID, \
         AWS_SECRET_ACCESS_KEY); this supervisor's environment has none: it was started \
         by a skyc command without them; export them where you run skyc and end the \
         supervisor (the pid in the state directory's supervisor.pid), and the next skyc \
         command starts one with them"
    );
}

/// A plan stored by an older skyc, with the keys in its `settings`:
/// read for its profile, region and endpoint; the keys are not kept.
#[test]
fn an_older_plans_settings_are_read_without_their_keys() {
    let old = r#"{"profile":"team","credentials":{"access_key_id":"AK","secret_access_key":"S","session_token":null},"credentials_source":"~/.aws/credentials [team]","region":"us-east-1","endpoint":"http://e:1"}"#;
    let a: Access = serde_json::from_str(old).unwrap();
    assert_eq!(a.profile, "team");
    assert_eq!(a.source, Source::Profile);
    assert_eq!(a.endpoint.as_deref(), Some("http://e:1"));
    assert!(!serde_json::to_string(&a).unwrap().contains("\"S\""));
}
