//! Which variable names mean a secret, by their words: a name is split into words (at `_`,
//! `-` and any other non-alphanumeric byte, at case changes, between letters and digits) and
//! scrubbed if one of them names a secret (`KEY`, `TOKEN`, `SECRET`, `PASS`, `AUTH`,
//! `SESSION`...), unless the whole name is one of the well-known harmless ones that only look
//! like it. Pure: no policy, no values (`key_forms` judges values).

use crate::glob::glob_match;

/// Words that name a secret, compared with each word of a name ignoring case.
pub const SECRET_WORDS: &[&str] = &[
    "KEY",
    "KEYS",
    "KEYFILE",
    "KEYTAB",
    "KEYSTORE",
    "PASS",
    "PWD",
    "CRED",
    "CREDS",
    "AUTH",
    "OAUTH",
    "AUTHORIZATION",
    // A personal access token (GitHub, Azure DevOps, GitLab).
    "PAT",
    "COOKIE",
    "COOKIES",
    // A logged-in session's key (Bitwarden's BW_SESSION, 1Password's OP_SESSION_*, cloud
    // session tokens); the desktop's session names are the harmless list's.
    "SESSION",
    "JWT",
    // A data source name: a database's or Sentry's, with its password or key inside.
    "DSN",
    // A URL that lets whoever holds it post (Slack, Discord, Teams).
    "WEBHOOK",
    // sshpass's password (`sshpass -e` reads SSHPASS).
    "SSHPASS",
    // A wallet's recovery words (BIP-39): the wallet itself.
    "MNEMONIC",
    // The secret mixed into password hashes besides the stored salt (a salt is stored beside
    // each hash in the clear and stays: it protects nothing by being hidden).
    "PEPPER",
];

/// Words that name a secret only as a name's last word: `PW` in `LDAP_BIND_PW`, `ADMIN_PW`,
/// `ROOT_PW` (OpenLDAP's, container images' passwords), while `PW_TEST_*` (Playwright's test
/// runner) begins with it and holds none.
pub const SECRET_LAST_WORDS: &[&str] = &["PW"];

/// Two words in a row that name a secret where neither alone does (`SEED` alone is a random
/// seed of a reproducible run, `CODES` alone anything): a wallet's recovery phrase, a TOTP or
/// MFA secret (the seed every one-time code is made from), a login's recovery codes.
pub const SECRET_PAIRS: &[(&str, &str)] = &[
    ("SEED", "PHRASE"),
    ("RECOVERY", "PHRASE"),
    ("TOTP", "SEED"),
    ("OTP", "SEED"),
    ("MFA", "SEED"),
    ("RECOVERY", "CODES"),
    ("BACKUP", "CODES"),
];

/// Endings that name a secret when written as one word too (`ACCESSTOKEN` in Azure
/// Pipelines' `SYSTEM_ACCESSTOKEN`, `PGPASSWORD`, `CLIENTSECRET`, `APIKEY`), and alone.
pub const SECRET_ENDINGS: &[&str] = &[
    "TOKEN",
    "TOKENS",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWORDS",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "CREDENTIALS",
    "APIKEY",
    "ACCESSKEY",
    "SECRETKEY",
    "PRIVATEKEY",
    "AUTHKEY",
    // A Java keystore's and its key's passwords (`KEYSTOREPASS`, keytool's `-storepass`,
    // `-keypass`).
    "STOREPASS",
    "KEYPASS",
    // An application's master key (`MASTERKEY`, Rails' and Meilisearch's as one word).
    "MASTERKEY",
];

/// Names (case-sensitive, `*` globs) whose words name a secret but which hold none, with why.
/// Only the word rule spares them: an `env.scrub` pattern or a value of a key's form still
/// scrubs them. Each entry is one the words would scrub (tested), so none is dead weight.
pub const HARMLESS: &[(&str, &str)] = &[
    ("XDG_SESSION_TYPE", "`tty`, `x11`, `wayland`"),
    ("XDG_SESSION_ID", "logind's number for the login"),
    ("XDG_SESSION_CLASS", "`user`, `greeter`"),
    ("XDG_SESSION_DESKTOP", "the desktop's name"),
    ("XDG_SESSION_PATH", "the display manager's D-Bus object path"),
    ("DESKTOP_SESSION", "the desktop's name"),
    ("SESSION_MANAGER", "the X session manager's ICE address: useless without ~/.ICEauthority"),
    ("TERM_SESSION_ID", "a terminal tab's id (macOS Terminal)"),
    ("ITERM_SESSION_ID", "a terminal tab's id (iTerm2)"),
    ("WT_SESSION", "a terminal tab's id (Windows Terminal under WSL)"),
    ("KONSOLE_DBUS_SESSION", "Konsole's D-Bus object path for the tab"),
    ("JPY_SESSION_NAME", "the notebook's path (Jupyter kernels)"),
    ("GPG_KEY", "a release key's fingerprint (the official Python images)"),
    ("GPG_KEYS", "release keys' fingerprints (the official PHP images)"),
    ("GIT_CONFIG_KEY_*", "a config entry's name (GIT_CONFIG_COUNT): without it git refuses to start"),
];

/// The word of `name` that names a secret, as written there (`Key` in `signingKey`), unless
/// `name` is a harmless one.
pub fn secret_word(name: &str) -> Option<&str> {
    let all: Vec<&str> = words(name).collect();
    let eq = |w: &str, s: &str| w.eq_ignore_ascii_case(s);
    let word = all.iter().enumerate().find_map(|(i, w)| {
        let last = i + 1 == all.len() && SECRET_LAST_WORDS.iter().any(|s| eq(w, s));
        if is_secret_word(w) || last {
            return Some(*w);
        }
        let next = all.get(i + 1)?;
        SECRET_PAIRS.iter().any(|(a, b)| eq(w, a) && eq(next, b)).then(|| span(name, w, next))
    })?;
    match HARMLESS.iter().any(|(h, _)| glob_match(h, name)) {
        true => None,
        false => Some(word),
    }
}

/// The part of `name` from word `a` to word `b` (both slices of it), the separator included.
fn span<'n>(name: &'n str, a: &str, b: &str) -> &'n str {
    let start = a.as_ptr() as usize - name.as_ptr() as usize;
    let end = b.as_ptr() as usize - name.as_ptr() as usize + b.len();
    &name[start..end]
}

fn is_secret_word(w: &str) -> bool {
    let ends = |e: &str| {
        w.len() >= e.len() && w.is_char_boundary(w.len() - e.len()) && w[w.len() - e.len()..].eq_ignore_ascii_case(e)
    };
    SECRET_WORDS.iter().any(|s| w.eq_ignore_ascii_case(s)) || SECRET_ENDINGS.iter().any(|e| ends(e))
}

/// The words of a variable name: split at every byte that is not an ASCII letter or digit,
/// between a lower-case letter and an upper-case one (`apiKey`), before the last capital of a
/// run followed by a lower-case letter (`HTTPProxy`: `HTTP`, `Proxy`), and between letters
/// and digits (`KEY2`, `S3`).
pub fn words(name: &str) -> impl Iterator<Item = &str> {
    let b = name.as_bytes();
    let mut start = 0;
    let mut i = 0;
    std::iter::from_fn(move || {
        while i <= b.len() {
            let at = i;
            i += 1;
            let cut = match (at.checked_sub(1).and_then(|p| b.get(p)), b.get(at)) {
                (_, None) => true,
                (_, Some(c)) if !c.is_ascii_alphanumeric() => true,
                (Some(p), Some(c)) => {
                    let next_lower = b.get(at + 1).is_some_and(u8::is_ascii_lowercase);
                    (p.is_ascii_lowercase() && c.is_ascii_uppercase())
                        || (p.is_ascii_uppercase() && c.is_ascii_uppercase() && next_lower)
                        || (p.is_ascii_alphabetic() != c.is_ascii_alphabetic() && p.is_ascii_alphanumeric())
                }
                (None, Some(_)) => false,
            };
            if !cut {
                continue;
            }
            // A word holds only ASCII letters and digits (every other byte cuts), so both of
            // its ends are character boundaries; a separator starts nothing.
            let word = (start < at).then(|| &name[start..at]);
            start = if b.get(at).is_some_and(u8::is_ascii_alphanumeric) { at } else { at + 1 };
            if word.is_some() {
                return word;
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(name: &str) -> Vec<&str> {
        words(name).collect()
    }

    #[test]
    fn names_split_into_words_at_separators_case_changes_and_digits() {
        assert_eq!(split("API_KEY"), ["API", "KEY"]);
        assert_eq!(split("ORG_GRADLE_PROJECT_signingKey"), ["ORG", "GRADLE", "PROJECT", "signing", "Key"]);
        assert_eq!(split("apiKey"), ["api", "Key"]);
        assert_eq!(split("HTTPProxy"), ["HTTP", "Proxy"]);
        assert_eq!(split("OAuthToken"), ["O", "Auth", "Token"]);
        assert_eq!(split("npm_config__auth"), ["npm", "config", "auth"]);
        assert_eq!(split("_ModuleTable001_"), ["Module", "Table", "001"]);
        assert_eq!(split("API_KEY2"), ["API", "KEY", "2"]);
        assert_eq!(split("KRB5CCNAME"), ["KRB", "5", "CCNAME"]);
        assert_eq!(split("npm_config_//registry.npmjs.org/:_authToken").last(), Some(&"Token"));
        assert_eq!(split("SYSTEM_ACCESSTOKEN"), ["SYSTEM", "ACCESSTOKEN"]);
        assert_eq!(split("a-b"), ["a", "b"]);
        assert_eq!(split(""), Vec::<&str>::new());
        assert_eq!(split("__"), Vec::<&str>::new());
        assert_eq!(split("é_KEY"), ["KEY"]);
    }

    #[test]
    fn a_secret_word_is_a_whole_word_or_a_compounds_ending() {
        for (name, word) in [
            ("API_KEY", "KEY"),
            ("SYSTEM_ACCESSTOKEN", "ACCESSTOKEN"),
            ("PGPASSWORD", "PGPASSWORD"),
            ("apiKey", "Key"),
            ("GitHubPAT", "PAT"),
            ("BW_SESSION", "SESSION"),
            ("MYSQL_PWD", "PWD"),
        ] {
            assert_eq!(secret_word(name), Some(word), "{name}");
        }
        // AUTHOR is not AUTH, TOKENIZERS not TOKEN, KEYTIMEOUT not KEY, PATH not PAT.
        for name in ["GIT_AUTHOR_NAME", "TOKENIZERS_PARALLELISM", "KEYTIMEOUT", "PATH", "GPG_TTY", "PASSENGER_APP_ENV"]
        {
            assert_eq!(secret_word(name), None, "{name}");
        }
    }

    /// The harmless list spares names the word rule would scrub; an entry the words never
    /// catch would be a promise the list does not need to make.
    #[test]
    fn every_harmless_name_is_one_the_words_would_scrub_and_says_why() {
        for (name, why) in HARMLESS {
            let example = name.replace('*', "0");
            assert!(words(&example).any(is_secret_word), "{name}: no secret word, the entry does nothing");
            assert_eq!(secret_word(&example), None, "{name}");
            assert!(!why.is_empty(), "{name}: say why");
        }
    }

    #[test]
    fn the_word_tables_are_upper_case_and_distinct() {
        let all: Vec<&str> = SECRET_WORDS.iter().chain(SECRET_ENDINGS).copied().collect();
        let mut seen = std::collections::BTreeSet::new();
        for w in &all {
            assert_eq!(*w, w.to_ascii_uppercase(), "{w}");
            assert!(w.bytes().all(|c| c.is_ascii_alphanumeric()), "{w}: one word");
            assert!(seen.insert(*w), "{w} twice");
        }
    }
}
