//! Values that are a provider's key whatever their variable is called: most providers' keys
//! have a fixed prefix and a body of a known alphabet and length (`ghp_` and 36 letters and
//! digits, `AKIA` and 16 capitals or digits). A key is found anywhere in a value where a word
//! starts (a key pasted into a saved command, a URL or a header counts too), so that a harmless
//! name cannot carry one into the jail. Pure: no policy, no names.

/// The bytes a key's body is made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Alphabet {
    /// `A-Z a-z 0-9`.
    Alnum,
    /// `A-Z a-z 0-9 _ -` (base64url).
    Url,
    /// `A-Z 0-9`.
    Upper,
    /// `0-9 a-f`.
    Hex,
    /// `A-Z a-z 0-9 -` (Slack's tokens).
    Dashed,
}

impl Alphabet {
    fn has(self, c: u8) -> bool {
        match self {
            Alphabet::Alnum => c.is_ascii_alphanumeric(),
            Alphabet::Url => c.is_ascii_alphanumeric() || c == b'_' || c == b'-',
            Alphabet::Upper => c.is_ascii_uppercase() || c.is_ascii_digit(),
            Alphabet::Hex => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
            Alphabet::Dashed => c.is_ascii_alphanumeric() || c == b'-',
        }
    }
}

/// One provider's key: `prefix`, then `min..=max` bytes of `body`. `mixed`: the body also
/// holds two of capitals, small letters and digits, as a random key does and a word does not
/// (for prefixes a word could start with: `sk-learn`, `xoxb-integration`).
#[derive(Debug)]
pub struct KeyForm {
    pub provider: &'static str,
    pub prefix: &'static str,
    pub body: Alphabet,
    pub min: usize,
    pub max: usize,
    pub mixed: bool,
}

const fn form(
    provider: &'static str,
    prefix: &'static str,
    body: Alphabet,
    min: usize,
    max: usize,
    mixed: bool,
) -> KeyForm {
    KeyForm { provider, prefix, body, min, max, mixed }
}

use Alphabet::{Alnum, Dashed, Hex, Upper, Url};

/// The forms, from each provider's documentation of its keys.
pub const KEY_FORMS: &[KeyForm] = &[
    // sk-proj-, sk-svcacct-, sk-ant-api03-, sk-or-v1- (OpenRouter), DeepSeek's sk-.
    form("OpenAI, Anthropic or OpenRouter key", "sk-", Url, 20, 512, true),
    form("GitHub token", "ghp_", Alnum, 30, 255, false),
    form("GitHub token", "gho_", Alnum, 30, 255, false),
    form("GitHub token", "ghu_", Alnum, 30, 255, false),
    form("GitHub token", "ghs_", Alnum, 30, 255, false),
    form("GitHub token", "ghr_", Alnum, 30, 255, false),
    form("GitHub token", "github_pat_", Url, 22, 255, false),
    form("GitLab token", "glpat-", Url, 20, 255, false),
    form("GitLab token", "gldt-", Url, 20, 255, false),
    form("GitLab token", "glrt-", Url, 20, 255, false),
    form("GitLab token", "glptt-", Url, 20, 255, false),
    form("GitLab token", "glft-", Url, 20, 255, false),
    form("GitLab token", "glcbt-", Url, 20, 255, false),
    form("GitLab token", "gloas-", Url, 20, 255, false),
    form("Slack token", "xoxb-", Dashed, 20, 255, true),
    form("Slack token", "xoxp-", Dashed, 20, 255, true),
    form("Slack token", "xoxa-", Dashed, 20, 255, true),
    form("Slack token", "xoxr-", Dashed, 20, 255, true),
    form("Slack token", "xoxs-", Dashed, 20, 255, true),
    form("Slack token", "xoxe-", Dashed, 20, 255, true),
    form("Slack token", "xapp-", Dashed, 20, 255, true),
    form("AWS access key", "AKIA", Upper, 16, 16, false),
    form("AWS access key", "ASIA", Upper, 16, 16, false),
    form("Hugging Face token", "hf_", Alnum, 30, 64, true),
    form("Google API key", "AIza", Url, 35, 35, false),
    form("npm token", "npm_", Alnum, 36, 36, false),
    form("PyPI token", "pypi-", Url, 50, 4096, false),
    // A PyPI token is a macaroon whose base64 starts with its location, `pypi.org` (or
    // `test.pypi.org`): that start says PyPI token however short the rest is cut.
    form("PyPI token", "pypi-AgEIcHlwaS5vcmc", Url, 8, 4096, false),
    form("PyPI token", "pypi-AgENdGVzdC5weXBpLm9yZw", Url, 8, 4096, false),
    form("Stripe key", "sk_live_", Alnum, 16, 255, false),
    form("Stripe key", "rk_live_", Alnum, 16, 255, false),
    form("Stripe key", "sk_test_", Alnum, 16, 255, false),
    form("Groq key", "gsk_", Alnum, 20, 255, true),
    form("Replicate token", "r8_", Alnum, 20, 255, true),
    form("xAI key", "xai-", Alnum, 20, 255, true),
    form("Perplexity key", "pplx-", Alnum, 20, 255, true),
    form("DigitalOcean token", "dop_v1_", Hex, 64, 64, false),
    form("DigitalOcean token", "doo_v1_", Hex, 64, 64, false),
    form("Databricks token", "dapi", Hex, 32, 32, false),
    form("Linear key", "lin_api_", Alnum, 32, 64, false),
    form("Grafana token", "glsa_", Url, 32, 64, false),
    form("Tailscale key", "tskey-", Url, 20, 255, true),
    form("HashiCorp Vault token", "hvs.", Url, 24, 255, true),
    form("age secret key", "AGE-SECRET-KEY-1", Upper, 50, 70, false),
    // NGC and NIM (build.nvidia.com) API keys.
    form("NVIDIA API key", "nvapi-", Url, 40, 255, true),
];

/// What a value can hold besides a provider's key form, as `find` names each (for `policy
/// show`).
pub const VALUE_FORMS: &[&str] = &[JWT, PEM, URL_PASSWORD, URL_TOKEN_USER, WEBHOOK_URL, SAS_SIGNATURE, AUTHORIZATION];

const JWT: &str = "JSON Web Token";
const PEM: &str = "PEM private key";
const URL_PASSWORD: &str = "password in a URL";
const URL_TOKEN_USER: &str = "token as a URL's user";
const WEBHOOK_URL: &str = "Slack or Discord webhook URL";
const SAS_SIGNATURE: &str = "signed URL's signature (Azure SAS `sig=`)";
const AUTHORIZATION: &str = "credential in an Authorization header";

/// Webhook URLs: whoever holds one posts to the channel as the integration (the path after
/// these is the secret).
const WEBHOOKS: &[&str] = &["hooks.slack.com/services/", "discord.com/api/webhooks/", "discordapp.com/api/webhooks/"];

/// What a value holds, if it holds a key: the provider's key, a JSON Web Token, a PEM
/// private key, a URL that carries its password (`postgres://u:pw@db/x`, whatever the
/// variable is called: `DATABASE_URL`, `PIP_INDEX_URL`, `MLFLOW_TRACKING_URI`) or a token as
/// its user (`https://TOKEN@github.com/o/r`), a webhook URL, an Azure SAS signature, an
/// `Authorization:` header with its credential (`GIT_CONFIG_VALUE_0=Authorization: Bearer ...`).
pub fn find(value: &str) -> Option<&'static str> {
    let b = value.as_bytes();
    if value.contains("PRIVATE KEY-----") {
        return Some(PEM);
    }
    if WEBHOOKS.iter().any(|w| value.find(w).is_some_and(|i| value.len() > i + w.len())) {
        return Some(WEBHOOK_URL);
    }
    // Where a word starts: at the start, or after a byte that is no letter, digit or `_`.
    let starts = (0..b.len()).filter(|&i| i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'));
    for i in starts {
        let rest = &b[i..];
        if rest.starts_with(b"eyJ") && is_jwt(rest) {
            return Some(JWT);
        }
        // `sig=` as a query parameter (`?sig=` or `&sig=`, or a bare SAS token's start).
        let param = i == 0 || b[i - 1] == b'?' || b[i - 1] == b'&';
        if param && rest.starts_with(b"sig=") && is_signature(&rest[4..]) {
            return Some(SAS_SIGNATURE);
        }
        if let Some(f) =
            KEY_FORMS.iter().find(|f| rest.starts_with(f.prefix.as_bytes()) && body_fits(f, &rest[f.prefix.len()..]))
        {
            return Some(f.provider);
        }
    }
    // After the forms: a provider's key in a header or a URL is named as that provider's.
    if has_authorization(value) {
        return Some(AUTHORIZATION);
    }
    url_credential(value)
}

/// An Azure SAS signature: base64 of an HMAC-SHA256 (44 bytes, `%2B`, `%2F`, `%3D` when
/// percent-encoded); 20 bytes at least, so that a short `sig=` of something else is none.
fn is_signature(rest: &[u8]) -> bool {
    let len = rest.iter().take_while(|c| c.is_ascii_alphanumeric() || b"%+/=_-".contains(c)).count();
    len >= 20
}

/// `Authorization:` (any case) then a scheme and a credential of 8 bytes at least (`Bearer
/// ...`, `Basic ...`, `token ...`): a header a tool sends, kept in a variable (`http.extraHeader`
/// through `GIT_CONFIG_VALUE_N`, a saved `curl -H`).
fn has_authorization(value: &str) -> bool {
    const HEADER: &[u8] = b"authorization:";
    let b = value.as_bytes();
    (0..b.len().saturating_sub(HEADER.len() - 1)).any(|i| {
        if !b[i..i + HEADER.len()].eq_ignore_ascii_case(HEADER) {
            return false;
        }
        let mut words = value[i + HEADER.len()..].split_whitespace();
        let scheme = words.next().is_some_and(|s| s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'));
        scheme && words.next().is_some_and(|cred| cred.trim_matches(['\'', '"']).len() >= 8)
    })
}

/// The body of `f` at the start of `rest`: the run of its alphabet, of a length it allows,
/// ending where no letter or digit follows.
fn body_fits(f: &KeyForm, rest: &[u8]) -> bool {
    let len = rest.iter().take_while(|c| f.body.has(**c)).count();
    let ends = rest.get(len).is_none_or(|c| !c.is_ascii_alphanumeric());
    let body = &rest[..len];
    let classes = [u8::is_ascii_uppercase, u8::is_ascii_lowercase, u8::is_ascii_digit]
        .iter()
        .filter(|class| body.iter().any(class))
        .count();
    (f.min..=f.max).contains(&len) && ends && (!f.mixed || classes >= 2)
}

/// A URL whose authority holds `user:password@` with a password, as RFC 3986 writes one:
/// a scheme (a letter, then letters, digits, `+`, `-`, `.`), `://`, and the userinfo ending at
/// the authority's last `@` before `/`, `?` or `#`; or a user and no password where the user is
/// a token's length (16 bytes or more of letters, digits, `_`, `-`: how GitHub, GitLab and
/// Azure DevOps take a token as the user, `https://TOKEN@github.com/o/r`). `ssh://git@host`, a
/// short user name, one with a dot (`first.last`) and `http://proxy:3128` (a port, no `@`)
/// hold none.
fn url_credential(value: &str) -> Option<&'static str> {
    let mut rest = value;
    while let Some(at) = rest.find("://") {
        let scheme = rest[..at].bytes().rev().take_while(|c| c.is_ascii_alphanumeric() || b"+-.".contains(c)).count();
        let starts_with_letter = rest[at - scheme..].bytes().next().is_some_and(|c| c.is_ascii_alphabetic());
        let after = &rest[at + 3..];
        let authority = &after[..after.find(['/', '?', '#', ' ', '\n']).unwrap_or(after.len())];
        if scheme > 0 && starts_with_letter {
            if let Some(userinfo) = authority.rfind('@').map(|i| &authority[..i]) {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                if !password.is_empty() {
                    return Some(URL_PASSWORD);
                }
                let token = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
                if user.len() >= 16 && user.bytes().all(token) {
                    return Some(URL_TOKEN_USER);
                }
            }
        }
        rest = after;
    }
    None
}

/// Three base64url parts of at least 10 bytes, joined by dots, the first a JSON object's
/// (`eyJ` is `{"`).
fn is_jwt(rest: &[u8]) -> bool {
    let url = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-';
    let mut at = 0;
    for part in 0..3 {
        let len = rest[at..].iter().take_while(|c| url(c)).count();
        if len < 10 {
            return false;
        }
        at += len;
        if part < 2 {
            if rest.get(at) != Some(&b'.') {
                return false;
            }
            at += 1;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body of `len` bytes of `a`, holding capitals, small letters and digits where the
    /// alphabet has them.
    fn body(a: Alphabet, len: usize) -> String {
        let pool: Vec<u8> = (0u8..=127).filter(|c| a.has(*c) && c.is_ascii_alphanumeric()).collect();
        (0..len).map(|i| pool[(i * 7 + 3) % pool.len()] as char).collect()
    }

    #[test]
    fn every_form_finds_its_key_anywhere_a_word_starts_and_not_one_byte_short() {
        for f in KEY_FORMS {
            let key = format!("{}{}", f.prefix, body(f.body, f.min));
            assert_eq!(find(&key), Some(f.provider), "{key}");
            assert_eq!(find(&format!("Authorization: Bearer {key}")), Some(f.provider), "{key} in a header");
            assert_eq!(find(&format!("https://u:{key}@host/x")), Some(f.provider), "{key} in a URL");
            let short = format!("{}{}", f.prefix, body(f.body, f.min - 1));
            assert_eq!(find(&short), None, "{short}: one byte short");
            // Inside a word it is no key (`task-...` does not start `sk-`).
            assert_eq!(find(&format!("x{key}")), None, "x{key}");
            if f.max < 255 {
                let long = format!("{}{}", f.prefix, body(f.body, f.max + 1));
                assert_eq!(find(&long), None, "{long}: one byte long");
            }
        }
    }

    #[test]
    fn real_examples_from_the_providers_documentation_are_keys() {
        for (value, provider) in [
            ("AKIAIOSFODNN7EXAMPLE", "AWS access key"),
            ("ghp_16C7e42F292c6912E7710c838347Ae178B4a", "GitHub token"),
            ("xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy", "Slack token"),
            ("glpat-xxxxxxxxxxxxxxxxxxxx", "GitLab token"),
            (
                "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
                "JSON Web Token",
            ),
            ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----", "PEM private key"),
            ("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", "NVIDIA API key"),
            ("pypi-AgEIcHlwaS5vcmcCJGI4YmNhMDA5LTg0", "PyPI token"),
            ("pypi-AgENdGVzdC5weXBpLm9yZwIkYWJjZGVm", "PyPI token"),
        ] {
            assert_eq!(find(value), Some(provider), "{value}");
        }
    }

    /// Values every session has: none of them may look like a key.
    #[test]
    fn ordinary_values_are_no_keys() {
        for value in [
            "sk_SK.UTF-8",
            "/opt/sk-learn-1.2/bin:/usr/bin",
            "/scratch/u/hf_cache",
            "/home/u/.cache/huggingface/hf_transformers_modules_directory_x",
            "feature/xoxb-integration-tests-for-the-bot",
            "ghp_short",
            "AKIAshort",
            "AKIAIOSFODNN7EXAMPLEANDMORE",
            "task-runner-configuration-file-2024",
            "eyJ.short.parts",
            "keyring.backends.null.Keyring",
            "7169605F62C751356D054A26A821E680E5FA6305",
            "w0t0p0:6F2B1C3E-0000-4000-8000-000000000000",
            "local/node1:@/tmp/.ICE-unix/1234,unix/node1:/tmp/.ICE-unix/1234",
            "X01vZHVsZVRhYmxlXz17WyJNVHZlcnNpb24iXT0zLFsiY19yZWJ1aWxkVGltZSJdPWZhbHNl",
            "",
        ] {
            assert_eq!(find(value), None, "{value}");
        }
    }

    #[test]
    fn a_url_with_a_password_is_a_secret_and_one_without_is_not() {
        for value in [
            "postgres://app:s3cret@db.example.org:5432/prod",
            "https://__token__:pypi-abc@upload.pypi.org/legacy/",
            "https://user:pw@pypi.example.org/simple",
            "mysql+pymysql://root:hunter2@localhost/db?charset=utf8",
            "redis://:password@cache:6379/0",
            "--extra-index-url https://u:p@idx.example/simple other",
            "http://user:p@ss@proxy:3128",
        ] {
            assert_eq!(find(value), Some("password in a URL"), "{value}");
        }
        for value in [
            "http://proxy.example.org:3128",
            "ssh://git@github.com/org/repo.git",
            "git@github.com:org/repo.git",
            "https://pypi.org/simple",
            "https://example.org/a:b@c",
            "https://user@host/",
            "https://user:@host/",
            "://:x@",
            "mailto:someone@example.org",
            "1://u:p@h",
        ] {
            assert_eq!(find(value), None, "{value}");
        }
    }

    /// Red team 32 R7: a token as a URL's user (no password), a webhook URL, an Azure SAS
    /// signature and an `Authorization:` header's credential, under any name.
    #[test]
    fn tokens_as_users_webhooks_signatures_and_authorization_headers_are_secrets() {
        for (value, what) in [
            ("https://CANARYGHTOKENUSER@github.com/o/r.git", URL_TOKEN_USER),
            ("https://0123456789abcdef0123456789abcdef01234567@github.com/o/r", URL_TOKEN_USER),
            ("git clone https://ado-pat-abcdefghijklmnop@dev.azure.com/org/p/_git/r", URL_TOKEN_USER),
            ("https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX", WEBHOOK_URL),
            ("https://discord.com/api/webhooks/123/abc", WEBHOOK_URL),
            (
                "https://acct.blob.core.windows.net/c/f?sv=2022-11-02&ss=b&sig=abcDEF123%2Bxyz%2F0987654321%3D",
                SAS_SIGNATURE,
            ),
            ("sv=2022-11-02&sr=c&sig=abcDEF123%2Bxyz%2F0987654321%3D", SAS_SIGNATURE),
            ("sig=abcDEF123%2Bxyz%2F0987654321%3D", SAS_SIGNATURE),
            ("Authorization: Bearer CANARY-HEADER-TOKEN", AUTHORIZATION),
            ("authorization: basic dXNlcjpwYXNzd29yZA==", AUTHORIZATION),
            ("curl -H 'Authorization: token abcdefgh12' https://api", AUTHORIZATION),
        ] {
            assert_eq!(find(value), Some(what), "{value}");
        }
        for value in [
            "https://git@github.com/o/r.git",
            "https://x-access-token@github.com/o/r",
            "https://first.lastname.longer@host/x",
            "https://alice@host/x",
            "https://hooks.slack.com/services/",
            "https://slack.com/services/x",
            "https://acct.blob.core.windows.net/c/f?sv=2022-11-02&ss=b",
            "?design=abcdefghijklmnopqrstuvwxyz",
            "&sig=short",
            "Authorization: Bearer",
            "Authorization: Bearer short",
            "Authorization required",
        ] {
            assert_eq!(find(value), None, "{value}");
        }
    }

    #[test]
    fn the_forms_table_is_sound() {
        for f in KEY_FORMS {
            assert!(!f.prefix.is_empty() && !f.provider.is_empty(), "{f:?}");
            assert!(0 < f.min && f.min <= f.max, "{f:?}");
            assert!(f.prefix.is_ascii() && !f.prefix.contains(char::is_whitespace), "{f:?}");
        }
    }
}
