//! AWS Signature Version 4, as the EC2 Query API needs it: pure (the time
//! is an argument), on bytes, with ring's HMAC-SHA256.
//!
//! The steps are AWS's: a canonical request (method, path, sorted and
//! encoded query, lower-cased trimmed headers, signed header names, the
//! payload's SHA-256), a string to sign naming the credential scope
//! (`date/region/service/aws4_request`), a key derived from the secret by
//! four HMACs, and the signature in an `Authorization` header ([`sign`]),
//! or in the URL's query ([`presign`], S3's presigned URLs).

use ring::{digest, hmac};
use std::fmt::Write as _;

const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// What a request is signed with.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Temporary credentials (STS, SSO) come with one; it is sent as
    /// `X-Amz-Security-Token` and signed.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    // Secrets never reach a log or an error message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"***")
            .field("session_token", &self.session_token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// A request to sign.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    /// `host` or `host:port` as sent in the `Host` header.
    pub host: &'a str,
    /// The path, already URI-encoded (EC2: `/`).
    pub path: &'a str,
    /// Query parameters, not encoded.
    pub query: &'a [(&'a str, &'a str)],
    /// Headers to sign besides `host`, `x-amz-date` and the session token.
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

/// Where and when a request is signed.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    pub region: &'a str,
    pub service: &'a str,
    /// `YYYYMMDDTHHMMSSZ`, UTC.
    pub amz_date: &'a str,
}

/// The headers to add to the request: `x-amz-date`, the session token
/// when there is one, and `authorization`.
pub fn sign(req: &Request<'_>, scope: Scope<'_>, creds: &Credentials) -> Vec<(String, String)> {
    let payload = hex(digest::digest(&digest::SHA256, req.body).as_ref());
    sign_hashed(req, scope, creds, &payload)
}

/// [`sign`] with the payload given by its SHA-256 (hex), as S3 signs a
/// body streamed rather than held: `req.body` is not read.
pub fn sign_hashed(
    req: &Request<'_>,
    scope: Scope<'_>,
    creds: &Credentials,
    payload_sha256: &str,
) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), (*v).to_owned()))
        .collect();
    headers.push(("host".into(), req.host.to_owned()));
    headers.push(("x-amz-date".into(), scope.amz_date.to_owned()));
    if let Some(token) = &creds.session_token {
        headers.push(("x-amz-security-token".into(), token.clone()));
    }
    let (canonical, signed) = canonical_request(req, req.query, &headers, payload_sha256);
    let credential_scope = credential_scope(scope);
    let signature = signature(scope, creds, &credential_scope, &canonical);
    let mut out = vec![("x-amz-date".to_owned(), scope.amz_date.to_owned())];
    if let Some(token) = &creds.session_token {
        out.push(("x-amz-security-token".into(), token.clone()));
    }
    out.push((
        "authorization".into(),
        format!(
            "{ALGORITHM} Credential={}/{credential_scope}, SignedHeaders={signed}, Signature={signature}",
            creds.access_key_id
        ),
    ));
    out
}

/// What a presigned URL says after its `?`: `req.query` with SigV4's
/// parameters (the session token among them, signed), valid for
/// `expires_secs` from `scope.amz_date`, signed over the `host` header
/// alone with an unsigned payload, as S3 takes it. Encoded.
pub fn presign(
    req: &Request<'_>,
    scope: Scope<'_>,
    creds: &Credentials,
    expires_secs: u64,
) -> String {
    let credential_scope = credential_scope(scope);
    let credential = format!("{}/{credential_scope}", creds.access_key_id);
    let expires = expires_secs.to_string();
    let mut query: Vec<(&str, &str)> = req.query.to_vec();
    query.extend([
        ("X-Amz-Algorithm", ALGORITHM),
        ("X-Amz-Credential", &credential),
        ("X-Amz-Date", scope.amz_date),
        ("X-Amz-Expires", &expires),
    ]);
    if let Some(token) = &creds.session_token {
        query.push(("X-Amz-Security-Token", token));
    }
    query.push(("X-Amz-SignedHeaders", "host"));
    let headers = [("host".to_owned(), req.host.to_owned())];
    let (canonical, _) = canonical_request(req, &query, &headers, "UNSIGNED-PAYLOAD");
    let signature = signature(scope, creds, &credential_scope, &canonical);
    let mut out = canonical_query(&query);
    let _ = write!(out, "&X-Amz-Signature={signature}");
    out
}

/// `date/region/service/aws4_request`.
fn credential_scope(scope: Scope<'_>) -> String {
    let date = &scope.amz_date[..scope.amz_date.len().min(8)];
    format!("{date}/{}/{}/aws4_request", scope.region, scope.service)
}

fn signature(
    scope: Scope<'_>,
    creds: &Credentials,
    credential_scope: &str,
    canonical: &str,
) -> String {
    let date = &scope.amz_date[..scope.amz_date.len().min(8)];
    let to_sign = string_to_sign(scope.amz_date, credential_scope, canonical);
    let key = signing_key(&creds.secret_access_key, date, scope.region, scope.service);
    hex(hmac::sign(&key, to_sign.as_bytes()).as_ref())
}

/// The query, each name and value encoded, sorted, joined by `&`.
fn canonical_query(query: &[(&str, &str)]) -> String {
    let mut query: Vec<(String, String)> =
        query.iter().map(|(k, v)| (encode(k), encode(v))).collect();
    query.sort();
    query
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The canonical request and its signed header names (`a;b;c`).
fn canonical_request(
    req: &Request<'_>,
    query: &[(&str, &str)],
    headers: &[(String, String)],
    payload_sha256: &str,
) -> (String, String) {
    let query = canonical_query(query);
    // Same-named headers are one, their values joined by commas in the
    // order given; values trimmed and inner runs of spaces made one.
    let mut merged: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for (k, v) in headers {
        merged
            .entry(k.as_str())
            .or_default()
            .push(v.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    let mut canonical_headers = String::new();
    for (k, vs) in &merged {
        let _ = writeln!(canonical_headers, "{k}:{}", vs.join(","));
    }
    let signed = merged.keys().copied().collect::<Vec<_>>().join(";");
    let path = if req.path.is_empty() { "/" } else { req.path };
    let canonical = format!(
        "{}\n{path}\n{query}\n{canonical_headers}\n{signed}\n{payload_sha256}",
        req.method,
    );
    (canonical, signed)
}

fn string_to_sign(amz_date: &str, credential_scope: &str, canonical: &str) -> String {
    format!(
        "{ALGORITHM}\n{amz_date}\n{credential_scope}\n{}",
        hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    )
}

/// `HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")`.
fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> hmac::Key {
    let mut key = format!("AWS4{secret}").into_bytes();
    for part in [date, region, service, "aws4_request"] {
        let k = hmac::Key::new(hmac::HMAC_SHA256, &key);
        key = hmac::sign(&k, part.as_bytes()).as_ref().to_vec();
    }
    hmac::Key::new(hmac::HMAC_SHA256, &key)
}

/// SigV4's URI encoding (RFC 3986): every byte but `A-Z a-z 0-9 - _ . ~`
/// as `%XX`, upper-case. The EC2 Query API's form body uses the same.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// `YYYYMMDDTHHMMSSZ` of a Unix time in seconds.
pub fn amz_date(unix_secs: i64) -> String {
    let ts = jiff::Timestamp::from_second(unix_secs).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    ts.strftime("%Y%m%dT%H%M%SZ").to_string()
}

/// The values of AWS's Signature Version 4 test suite
/// (docs.aws.amazon.com/general/latest/gr/signature-v4-test-suite.html,
/// `aws-sig-v4-test-suite.zip`: the `.req` requests and the signatures of
/// their `.authz` files) and of the IAM `ListUsers` example of "Examples
/// of the complete Signature Version 4 signing process" in the same
/// guide, written here by hand.
#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const DATE: &str = "20150830T123600Z";
    // post-sts-token/post-sts-header-before.req
    const STS_TOKEN: &str = "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==";

    fn creds(token: Option<&str>) -> Credentials {
        Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: SECRET.into(),
            session_token: token.map(str::to_owned),
        }
    }

    /// Signs a request of the suite (host `example.amazonaws.com`, region
    /// us-east-1, service `service`) and returns its Authorization header.
    fn suite(
        method: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &str,
        token: Option<&str>,
    ) -> String {
        let req = Request {
            method,
            host: "example.amazonaws.com",
            path: "/",
            query,
            headers,
            body: body.as_bytes(),
        };
        let scope = Scope {
            region: "us-east-1",
            service: "service",
            amz_date: DATE,
        };
        let out = sign(&req, scope, &creds(token));
        assert_eq!(out[0], ("x-amz-date".to_owned(), DATE.to_owned()));
        out.into_iter()
            .find(|(k, _)| k == "authorization")
            .unwrap()
            .1
    }

    fn authz(signed: &str, signature: &str) -> String {
        format!(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders={signed}, Signature={signature}"
        )
    }

    #[test]
    fn get_vanilla() {
        assert_eq!(
            suite("GET", &[], &[], "", None),
            authz(
                "host;x-amz-date",
                "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
            )
        );
    }

    #[test]
    fn get_vanilla_query_order_key_case() {
        assert_eq!(
            suite(
                "GET",
                &[("Param2", "value2"), ("Param1", "value1")],
                &[],
                "",
                None
            ),
            authz(
                "host;x-amz-date",
                "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"
            )
        );
    }

    #[test]
    fn get_vanilla_query_order_key() {
        assert_eq!(
            suite(
                "GET",
                &[("Param1", "value2"), ("Param1", "value1")],
                &[],
                "",
                None
            ),
            authz(
                "host;x-amz-date",
                "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694"
            )
        );
    }

    #[test]
    fn get_vanilla_utf8_query() {
        assert_eq!(
            suite("GET", &[("\u{1234}", "bar")], &[], "", None),
            authz(
                "host;x-amz-date",
                "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"
            )
        );
    }

    #[test]
    fn get_header_value_trim() {
        assert_eq!(
            suite(
                "GET",
                &[],
                &[("My-Header1", " value1"), ("My-Header2", " \"a   b   c\"")],
                "",
                None
            ),
            authz(
                "host;my-header1;my-header2;x-amz-date",
                "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"
            )
        );
    }

    #[test]
    fn post_vanilla() {
        assert_eq!(
            suite("POST", &[], &[], "", None),
            authz(
                "host;x-amz-date",
                "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
            )
        );
    }

    #[test]
    fn post_vanilla_query() {
        assert_eq!(
            suite("POST", &[("Param1", "value1")], &[], "", None),
            authz(
                "host;x-amz-date",
                "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"
            )
        );
    }

    #[test]
    fn post_x_www_form_urlencoded() {
        assert_eq!(
            suite(
                "POST",
                &[],
                &[("Content-Type", "application/x-www-form-urlencoded")],
                "Param1=value1",
                None
            ),
            authz(
                "content-type;host;x-amz-date",
                "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"
            )
        );
    }

    #[test]
    fn post_x_www_form_urlencoded_parameters() {
        assert_eq!(
            suite(
                "POST",
                &[],
                &[(
                    "Content-Type",
                    "application/x-www-form-urlencoded; charset=utf8"
                )],
                "Param1=value1",
                None
            ),
            authz(
                "content-type;host;x-amz-date",
                "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe"
            )
        );
    }

    #[test]
    fn post_sts_header_before() {
        assert_eq!(
            suite("POST", &[], &[], "", Some(STS_TOKEN)),
            authz(
                "host;x-amz-date;x-amz-security-token",
                "85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead"
            )
        );
    }

    /// The IAM `ListUsers` example, step by step.
    #[test]
    fn iam_list_users_example() {
        let headers = [(
            "Content-Type",
            "application/x-www-form-urlencoded; charset=utf-8",
        )];
        let req = Request {
            method: "GET",
            host: "iam.amazonaws.com",
            path: "/",
            query: &[("Action", "ListUsers"), ("Version", "2010-05-08")],
            headers: &headers,
            body: b"",
        };
        let all = vec![
            ("content-type".to_owned(), headers[0].1.to_owned()),
            ("host".to_owned(), "iam.amazonaws.com".to_owned()),
            ("x-amz-date".to_owned(), DATE.to_owned()),
        ];
        let (canonical, signed) = canonical_request(&req, req.query, &all, EMPTY_SHA256);
        assert_eq!(
            canonical,
            "GET\n/\nAction=ListUsers&Version=2010-05-08\n\
             content-type:application/x-www-form-urlencoded; charset=utf-8\n\
             host:iam.amazonaws.com\nx-amz-date:20150830T123600Z\n\n\
             content-type;host;x-amz-date\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(signed, "content-type;host;x-amz-date");
        let sts = string_to_sign(DATE, "20150830/us-east-1/iam/aws4_request", &canonical);
        assert_eq!(
            sts,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/iam/aws4_request\n\
             f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59"
        );
        // The derived key itself, as the example prints it.
        let mut key = format!("AWS4{SECRET}").into_bytes();
        for part in ["20150830", "us-east-1", "iam", "aws4_request"] {
            key = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), part.as_bytes())
                .as_ref()
                .to_vec();
        }
        assert_eq!(
            hex(&key),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"
        );
        let scope = Scope {
            region: "us-east-1",
            service: "iam",
            amz_date: DATE,
        };
        let out = sign(&req, scope, &creds(None));
        assert_eq!(
            out.last().unwrap().1,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, \
             Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    /// S3's examples ("Signature Calculations for the Authorization
    /// Header" and "Query String Authentication" of the S3 API reference):
    /// bucket `examplebucket`, region us-east-1, 24 May 2013.
    const S3_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const S3_HOST: &str = "examplebucket.s3.amazonaws.com";
    const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn s3_creds() -> Credentials {
        Credentials {
            access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_access_key: S3_SECRET.into(),
            session_token: None,
        }
    }

    fn s3_scope() -> Scope<'static> {
        Scope {
            region: "us-east-1",
            service: "s3",
            amz_date: "20130524T000000Z",
        }
    }

    fn s3_signature(
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        payload: &str,
    ) -> String {
        let req = Request {
            method,
            host: S3_HOST,
            path,
            query,
            headers,
            body: b"",
        };
        let signed = sign_hashed(&req, s3_scope(), &s3_creds(), payload);
        let authz = &signed.iter().find(|(k, _)| k == "authorization").unwrap().1;
        authz.rsplit("Signature=").next().unwrap().to_owned()
    }

    #[test]
    fn s3_get_object() {
        let sig = s3_signature(
            "GET",
            "/test.txt",
            &[],
            &[
                ("Range", "bytes=0-9"),
                ("x-amz-content-sha256", EMPTY_SHA256),
            ],
            EMPTY_SHA256,
        );
        assert_eq!(
            sig,
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn s3_put_object_with_a_hashed_payload() {
        let payload = hex(digest::digest(&digest::SHA256, b"Welcome to Amazon S3.").as_ref());
        assert_eq!(
            payload,
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
        );
        let sig = s3_signature(
            "PUT",
            "/test%24file.text",
            &[],
            &[
                ("Date", "Fri, 24 May 2013 00:00:00 GMT"),
                ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
                ("x-amz-content-sha256", &payload),
            ],
            &payload,
        );
        assert_eq!(
            sig,
            "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
        );
    }

    #[test]
    fn s3_list_objects() {
        let sig = s3_signature(
            "GET",
            "/",
            &[("max-keys", "2"), ("prefix", "J")],
            &[("x-amz-content-sha256", EMPTY_SHA256)],
            EMPTY_SHA256,
        );
        assert_eq!(
            sig,
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
        );
    }

    #[test]
    fn s3_presigned_get() {
        let req = Request {
            method: "GET",
            host: S3_HOST,
            path: "/test.txt",
            query: &[],
            headers: &[],
            body: b"",
        };
        assert_eq!(
            presign(&req, s3_scope(), &s3_creds(), 86400),
            "X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request\
             &X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\
             &X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        );
        // A session token is a signed parameter: the URL changes with it.
        let mut with_token = s3_creds();
        with_token.session_token = Some("tok/en".into());
        let url = presign(&req, s3_scope(), &with_token, 86400);
        assert!(url.contains("&X-Amz-Security-Token=tok%2Fen&"), "{url}");
        assert!(!url.ends_with("aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"));
    }

    #[test]
    fn a_wrong_secret_gives_another_signature() {
        let mut c = creds(None);
        c.secret_access_key.push('x');
        let req = Request {
            method: "GET",
            host: "example.amazonaws.com",
            path: "/",
            query: &[],
            headers: &[],
            body: b"",
        };
        let scope = Scope {
            region: "us-east-1",
            service: "service",
            amz_date: DATE,
        };
        assert!(
            !sign(&req, scope, &c)[1]
                .1
                .ends_with("5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
        );
    }

    #[test]
    fn encoding_and_dates() {
        assert_eq!(encode("a b+c/~é"), "a%20b%2Bc%2F~%C3%A9");
        assert_eq!(amz_date(1_440_938_160), DATE);
        assert!(!format!("{:?}", creds(Some("tok"))).contains(SECRET));
    }
}
