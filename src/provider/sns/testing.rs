//! Helpers for tests that need real signed SNS bodies: a throw-away RSA-2048 key
//! with a self-signed certificate, and a [`CertFetcher`] serving fixed PEMs.
//! Adds no dependency: the certificate is assembled by hand in DER, SHA256
//! signatures come from aws-lc-rs, and SHA1 ones (which aws-lc-rs will verify
//! but not produce) from a small modular exponentiation below.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use aws_lc_rs::digest;
use aws_lc_rs::encoding::AsDer as _;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_SHA256, RsaKeyPair};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::json;

use super::CertFetcher;

/// Where [`TestSigner::new`] says its certificate lives.
pub const TEST_CERT_URL: &str =
    "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-test.pem";

/// Signs SNS messages with a freshly generated key (generation takes a moment:
/// share one signer across tests).
pub struct TestSigner {
    key: RsaKeyPair,
    modulus: Vec<u8>,
    private_exponent: Vec<u8>,
    cert_pem: Vec<u8>,
    cert_url: String,
}

impl std::fmt::Debug for TestSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestSigner")
            .field("cert_url", &self.cert_url)
            .finish_non_exhaustive()
    }
}

impl Default for TestSigner {
    fn default() -> Self {
        Self::new()
    }
}

impl TestSigner {
    /// A signer whose certificate URL is [`TEST_CERT_URL`].
    pub fn new() -> Self {
        Self::with_cert_url(TEST_CERT_URL)
    }

    /// A signer that puts `cert_url` in `SigningCertURL`.
    pub fn with_cert_url(cert_url: &str) -> Self {
        let key = RsaKeyPair::generate(KeySize::Rsa2048).expect("RSA key generation");
        let pkcs8 = key.as_der().expect("PKCS#8 export");
        let (modulus, private_exponent) =
            rsa_private_parts(pkcs8.as_ref()).expect("parse own PKCS#8");
        let spki = key.public_key().as_der().expect("SPKI export");
        let cert_der = self_signed_cert(&key, spki.as_ref());
        TestSigner {
            key,
            modulus,
            private_exponent,
            cert_pem: pem("CERTIFICATE", &cert_der),
            cert_url: cert_url.to_owned(),
        }
    }

    pub fn cert_pem(&self) -> Vec<u8> {
        self.cert_pem.clone()
    }

    pub fn cert_url(&self) -> &str {
        &self.cert_url
    }

    /// A fetcher that serves this signer's certificate at its URL.
    pub fn fetcher(&self) -> StaticCertFetcher {
        StaticCertFetcher::new().with(&self.cert_url, self.cert_pem())
    }

    /// A complete Notification body without Subject. `version` 1 signs with
    /// SHA1, 2 with SHA256; any other value is written as the SignatureVersion
    /// (signed with SHA256) so tests can check it is refused.
    pub fn sign_notification(
        &self,
        topic_arn: &str,
        message: &str,
        message_id: &str,
        version: u8,
    ) -> String {
        self.sign_notification_with_subject(topic_arn, None, message, message_id, version)
    }

    /// Like [`TestSigner::sign_notification`], with an optional Subject.
    pub fn sign_notification_with_subject(
        &self,
        topic_arn: &str,
        subject: Option<&str>,
        message: &str,
        message_id: &str,
        version: u8,
    ) -> String {
        let timestamp = now_timestamp();
        let mut to_sign = String::new();
        for (k, v) in [("Message", message), ("MessageId", message_id)] {
            to_sign.push_str(&format!("{k}\n{v}\n"));
        }
        if let Some(subject) = subject {
            to_sign.push_str(&format!("Subject\n{subject}\n"));
        }
        for (k, v) in [
            ("Timestamp", timestamp.as_str()),
            ("TopicArn", topic_arn),
            ("Type", "Notification"),
        ] {
            to_sign.push_str(&format!("{k}\n{v}\n"));
        }
        let mut body = json!({
            "Type": "Notification",
            "MessageId": message_id,
            "TopicArn": topic_arn,
            "Message": message,
            "Timestamp": timestamp,
            "SignatureVersion": version.to_string(),
            "Signature": self.sign(to_sign.as_bytes(), version),
            "SigningCertURL": self.cert_url,
            "UnsubscribeURL": format!(
                "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn={topic_arn}:0b5e5e8a-test"
            ),
        });
        if let Some(subject) = subject {
            body["Subject"] = json!(subject);
        }
        body.to_string()
    }

    /// A complete SubscriptionConfirmation body, signed with SHA256 (version 2).
    pub fn sign_subscription_confirmation(
        &self,
        topic_arn: &str,
        subscribe_url: &str,
        message_id: &str,
    ) -> String {
        self.sign_confirmation(
            "SubscriptionConfirmation",
            topic_arn,
            subscribe_url,
            message_id,
        )
    }

    /// A complete UnsubscribeConfirmation body, signed with SHA256 (version 2).
    pub fn sign_unsubscribe_confirmation(
        &self,
        topic_arn: &str,
        subscribe_url: &str,
        message_id: &str,
    ) -> String {
        self.sign_confirmation(
            "UnsubscribeConfirmation",
            topic_arn,
            subscribe_url,
            message_id,
        )
    }

    fn sign_confirmation(
        &self,
        kind: &str,
        topic_arn: &str,
        subscribe_url: &str,
        message_id: &str,
    ) -> String {
        let timestamp = now_timestamp();
        let token = "2336412f37fb687f5d51e6e2425c464de12884a5e4ba7b1f5ec7be8a1cd2e7a0-test";
        let message = format!(
            "You have chosen to subscribe to the topic {topic_arn}.\nTo confirm the subscription, visit the SubscribeURL included in this message."
        );
        let mut to_sign = String::new();
        for (k, v) in [
            ("Message", message.as_str()),
            ("MessageId", message_id),
            ("SubscribeURL", subscribe_url),
            ("Timestamp", timestamp.as_str()),
            ("Token", token),
            ("TopicArn", topic_arn),
            ("Type", kind),
        ] {
            to_sign.push_str(&format!("{k}\n{v}\n"));
        }
        json!({
            "Type": kind,
            "MessageId": message_id,
            "Token": token,
            "TopicArn": topic_arn,
            "Message": message,
            "SubscribeURL": subscribe_url,
            "Timestamp": timestamp,
            "SignatureVersion": "2",
            "Signature": self.sign(to_sign.as_bytes(), 2),
            "SigningCertURL": self.cert_url,
        })
        .to_string()
    }

    /// Base64 RSA PKCS#1 v1.5 signature of `data`: SHA1 for version 1, SHA256
    /// otherwise.
    pub fn sign(&self, data: &[u8], version: u8) -> String {
        let signature = if version == 1 {
            self.sign_sha1(data)
        } else {
            let mut out = vec![0u8; self.key.public_modulus_len()];
            self.key
                .sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), data, &mut out)
                .expect("RSA signing");
            out
        };
        BASE64.encode(signature)
    }

    /// EMSA-PKCS1-v1_5 with SHA1, then the raw RSA private-key operation.
    fn sign_sha1(&self, data: &[u8]) -> Vec<u8> {
        const SHA1_DIGEST_INFO: [u8; 15] = [
            0x30, 0x21, 0x30, 0x09, 0x06, 0x05, 0x2b, 0x0e, 0x03, 0x02, 0x1a, 0x05, 0x00, 0x04,
            0x14,
        ];
        let hash = digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, data);
        let k = self.modulus.len();
        let t_len = SHA1_DIGEST_INFO.len() + hash.as_ref().len();
        let mut em = vec![0xffu8; k];
        em[0] = 0x00;
        em[1] = 0x01;
        em[k - t_len - 1] = 0x00;
        em[k - t_len..k - hash.as_ref().len()].copy_from_slice(&SHA1_DIGEST_INFO);
        em[k - hash.as_ref().len()..].copy_from_slice(hash.as_ref());
        bignum::mod_pow(&em, &self.private_exponent, &self.modulus)
    }
}

/// Serves fixed PEM documents by URL and counts fetches.
#[derive(Debug, Default)]
pub struct StaticCertFetcher {
    certs: HashMap<String, Vec<u8>>,
    fetches: AtomicUsize,
}

impl StaticCertFetcher {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the document served at `url`.
    pub fn with(mut self, url: &str, pem: Vec<u8>) -> Self {
        self.certs.insert(url.to_owned(), pem);
        self
    }

    /// How many times `fetch` was called (hits and misses).
    pub fn fetch_count(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl CertFetcher for StaticCertFetcher {
    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        self.certs
            .get(url)
            .cloned()
            .ok_or_else(|| format!("no certificate at {url}"))
    }
}

/// `2024-05-01T12:00:00.123Z`, the shape SNS uses.
fn now_timestamp() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.millisecond()
    )
}

fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    let b64 = BASE64.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out.into_bytes()
}

// --- minimal DER ---------------------------------------------------------

fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0x81, len as u8]);
    } else {
        out.extend_from_slice(&[0x82, (len >> 8) as u8, len as u8]);
    }
    out.extend_from_slice(content);
    out
}

fn seq(parts: &[&[u8]]) -> Vec<u8> {
    tlv(0x30, &parts.concat())
}

/// A v3 self-signed certificate (CN=sns.amazonaws.com, no extensions), signed
/// with sha256WithRSAEncryption.
fn self_signed_cert(key: &RsaKeyPair, spki: &[u8]) -> Vec<u8> {
    // 1.2.840.113549.1.1.11, NULL
    let sha256_rsa = seq(&[
        &[
            0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b,
        ],
        &[0x05, 0x00],
    ]);
    // CN (2.5.4.3) = sns.amazonaws.com
    let cn = seq(&[
        &[0x06, 0x03, 0x55, 0x04, 0x03],
        &tlv(0x0c, b"sns.amazonaws.com"),
    ]);
    let name = seq(&[&tlv(0x31, &cn)]);
    let validity = seq(&[&tlv(0x17, b"200101000000Z"), &tlv(0x18, b"20991231235959Z")]);
    let version = tlv(0xa0, &[0x02, 0x01, 0x02]);
    let serial = [0x02, 0x01, 0x01];
    let tbs = seq(&[
        &version,
        &serial,
        &sha256_rsa,
        &name,
        &validity,
        &name,
        spki,
    ]);
    let mut signature = vec![0u8; key.public_modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        &tbs,
        &mut signature,
    )
    .expect("certificate signing");
    let mut bits = vec![0x00];
    bits.extend_from_slice(&signature);
    seq(&[&tbs, &sha256_rsa, &tlv(0x03, &bits)])
}

/// Reads one TLV: (tag, content, rest).
fn read_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// (n, d) from a PKCS#8 RSA private key, big-endian without leading zeros.
fn rsa_private_parts(pkcs8: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let (_, info, _) = read_tlv(pkcs8)?; // PrivateKeyInfo
    let (_, _, info) = read_tlv(info)?; // version
    let (_, _, info) = read_tlv(info)?; // algorithm
    let (_, octets, _) = read_tlv(info)?; // privateKey OCTET STRING
    let (_, rsa, _) = read_tlv(octets)?; // RSAPrivateKey
    let (_, _, rsa) = read_tlv(rsa)?; // version
    let (_, n, rsa) = read_tlv(rsa)?;
    let (_, _, rsa) = read_tlv(rsa)?; // e
    let (_, d, _) = read_tlv(rsa)?;
    let strip = |x: &[u8]| {
        let start = x.iter().position(|b| *b != 0).unwrap_or(x.len());
        x[start..].to_vec()
    };
    Some((strip(n), strip(d)))
}

/// Just enough unsigned big-integer arithmetic for one RSA private operation
/// (Montgomery multiplication over 64-bit limbs, little-endian). Not constant
/// time: test keys only.
mod bignum {
    fn to_limbs(be: &[u8], k: usize) -> Vec<u64> {
        let mut out = vec![0u64; k];
        for (i, b) in be.iter().rev().enumerate() {
            out[i / 8] |= u64::from(*b) << (8 * (i % 8));
        }
        out
    }

    fn to_be(limbs: &[u64], len: usize) -> Vec<u8> {
        (0..len)
            .rev()
            .map(|i| (limbs[i / 8] >> (8 * (i % 8))) as u8)
            .collect()
    }

    fn geq(a: &[u64], b: &[u64]) -> bool {
        for i in (0..b.len()).rev() {
            if a[i] != b[i] {
                return a[i] > b[i];
            }
        }
        true
    }

    /// a -= b over b.len() limbs, dropping the final borrow.
    fn sub_assign(a: &mut [u64], b: &[u64]) {
        let mut borrow = false;
        for (x, y) in a.iter_mut().zip(b) {
            let (d1, b1) = x.overflowing_sub(*y);
            let (d2, b2) = d1.overflowing_sub(u64::from(borrow));
            *x = d2;
            borrow = b1 || b2;
        }
    }

    /// x = 2x mod n, for x < n.
    fn double_mod(x: &mut [u64], n: &[u64]) {
        let mut carry = 0u64;
        for limb in x.iter_mut() {
            let next = *limb >> 63;
            *limb = (*limb << 1) | carry;
            carry = next;
        }
        if carry == 1 || geq(x, n) {
            sub_assign(x, n);
        }
    }

    /// a * b / R mod n (CIOS), for a, b < n.
    fn mont_mul(a: &[u64], b: &[u64], n: &[u64], n0inv: u64) -> Vec<u64> {
        let k = n.len();
        let mut t = vec![0u64; k + 2];
        for &ai in a {
            let mut c: u128 = 0;
            for j in 0..k {
                let s = u128::from(t[j]) + u128::from(ai) * u128::from(b[j]) + c;
                t[j] = s as u64;
                c = s >> 64;
            }
            let s = u128::from(t[k]) + c;
            t[k] = s as u64;
            t[k + 1] = (s >> 64) as u64;

            let m = t[0].wrapping_mul(n0inv);
            let s = u128::from(t[0]) + u128::from(m) * u128::from(n[0]);
            let mut c = s >> 64;
            for j in 1..k {
                let s = u128::from(t[j]) + u128::from(m) * u128::from(n[j]) + c;
                t[j - 1] = s as u64;
                c = s >> 64;
            }
            let s = u128::from(t[k]) + c;
            t[k - 1] = s as u64;
            t[k] = t[k + 1] + (s >> 64) as u64;
            t[k + 1] = 0;
        }
        let overflow = t[k] != 0;
        t.truncate(k);
        if overflow || geq(&t, n) {
            sub_assign(&mut t, n);
        }
        t
    }

    /// base^exp mod modulus; all big-endian, modulus odd, base < modulus.
    /// The result has the modulus's length.
    pub(super) fn mod_pow(base: &[u8], exp: &[u8], modulus: &[u8]) -> Vec<u8> {
        let k = modulus.len().div_ceil(8);
        let n = to_limbs(modulus, k);
        // -n^-1 mod 2^64 by Newton iteration (n odd).
        let mut inv = n[0];
        for _ in 0..6 {
            inv = inv.wrapping_mul(2u64.wrapping_sub(n[0].wrapping_mul(inv)));
        }
        let n0inv = inv.wrapping_neg();

        // R mod n and R^2 mod n, by doubling.
        let mut r = vec![0u64; k];
        r[0] = 1;
        for _ in 0..64 * k {
            double_mod(&mut r, &n);
        }
        let mut r2 = r.clone();
        for _ in 0..64 * k {
            double_mod(&mut r2, &n);
        }

        let base_m = mont_mul(&to_limbs(base, k), &r2, &n, n0inv);
        let mut acc = r;
        for byte in exp {
            for bit in (0..8).rev() {
                acc = mont_mul(&acc, &acc, &n, n0inv);
                if (byte >> bit) & 1 == 1 {
                    acc = mont_mul(&acc, &base_m, &n, n0inv);
                }
            }
        }
        let mut one = vec![0u64; k];
        one[0] = 1;
        to_be(&mont_mul(&acc, &one, &n, n0inv), modulus.len())
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn small_mod_pow() {
            // 4^13 mod 497 = 445
            assert_eq!(super::mod_pow(&[4], &[13], &[0x01, 0xf1]), vec![0x01, 0xbd]);
            // 7^560 mod 561 = 1 (561 is a Carmichael number)
            assert_eq!(
                super::mod_pow(&[7], &[0x02, 0x30], &[0x02, 0x31]),
                vec![0, 1]
            );
        }
    }
}
