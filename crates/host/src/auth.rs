//! Accounts, plans and API keys: `[auth]`, `[plans]` and `[[accounts]]`
//! (docs/reference/config.md).
//!
//! Contract:
//! * `auth.mode = "open"`: every request is the account `anonymous` on the
//!   plan `default` (keys are neither required nor checked).
//! * `auth.mode = "keys"`: the key comes from `Authorization: Bearer <key>`
//!   or `x-api-key: <key>` (both are tried, the first that belongs to an
//!   account wins); a missing or unknown key is an [`AuthError`] (a 401 in
//!   the endpoint's error shape, see [`crate::errors`]).
//! * Keys are stored hashed: `keys = ["sha256:<64 hex digits>"]`, the
//!   SHA-256 of the key's bytes ([`hash_key`] prints one). A key listed
//!   twice, a plan that does not exist, or a malformed hash is a start-up
//!   error naming the key.
//! * The plan `default` exists even when not configured (100 searches per
//!   day).
//!
//! Hosts pass plain header values, so any HTTP stack can use it:
//! [`Accounts::authenticate_headers`] takes an `http::HeaderMap`,
//! [`Accounts::authenticate`] the two raw values.
//!
//! # Example
//! ```
//! use citestream_host::auth::{hash_key, Accounts};
//! use citestream_host::config::Config;
//!
//! let toml = format!(
//!     "[auth]\nmode = \"keys\"\n[plans.pro]\nsearches_per_day = 3\n\
//!      [[accounts]]\nid = \"acme\"\nplan = \"pro\"\nkeys = [\"{}\"]\n",
//!     hash_key("sk-acme")
//! );
//! let cfg = Config::from_toml_with_env(&toml, &|_| None).unwrap();
//! let accounts = Accounts::from_config(&cfg).unwrap();
//! let acct = accounts.authenticate(Some(b"Bearer sk-acme"), None).unwrap();
//! assert_eq!((acct.id(), acct.searches_per_day()), ("acme", 3));
//! assert!(accounts.authenticate(None, Some(b"sk-other")).is_err());
//! ```

use std::collections::HashMap;
use std::fmt;

use sha2::{Digest, Sha256};

use crate::config::{AuthMode, Config, ConfigError, PlanConfig};

/// The account of open mode.
pub const ANONYMOUS: &str = "anonymous";
pub use crate::config::DEFAULT_PLAN;

/// One account with its plan resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    id: String,
    plan: String,
    searches_per_day: u32,
}

impl Account {
    /// The account id (the quota key).
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The plan's name.
    #[must_use]
    pub fn plan(&self) -> &str {
        &self.plan
    }

    /// The plan's daily search limit.
    #[must_use]
    pub fn searches_per_day(&self) -> u32 {
        self.searches_per_day
    }
}

/// Why a request has no account (`keys` mode only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuthError {
    /// Neither `Authorization: Bearer` nor `x-api-key` was sent.
    MissingKey,
    /// A key was sent but belongs to no account.
    UnknownKey,
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthError::MissingKey => {
                "Missing API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'."
            }
            AuthError::UnknownKey => "Incorrect API key provided.",
        })
    }
}

impl std::error::Error for AuthError {}

/// The accounts of a config and the lookup of keys.
#[derive(Clone, Debug)]
pub struct Accounts {
    mode: AuthMode,
    anonymous: Account,
    accounts: Vec<Account>,
    by_hash: HashMap<[u8; 32], usize>,
}

/// `sha256:<hex>` of `key`, as written in `[[accounts]] keys`.
#[must_use]
pub fn hash_key(key: &str) -> String {
    let mut s = String::from("sha256:");
    for b in Sha256::digest(key.as_bytes()) {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

impl Accounts {
    /// Resolves `[auth]`, `[plans]` and `[[accounts]]`, as the config's
    /// one copy of the accounts rules (`Config::checked_accounts`) checks them.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key: an unknown plan, a malformed or
    /// duplicate key hash, a duplicate account id, `keys` mode without any
    /// key.
    pub fn from_config(cfg: &Config) -> Result<Accounts, ConfigError> {
        let anonymous = Account {
            id: ANONYMOUS.to_owned(),
            plan: DEFAULT_PLAN.to_owned(),
            searches_per_day: cfg
                .plan_limit(DEFAULT_PLAN)
                .unwrap_or(PlanConfig::default().searches_per_day),
        };
        let mut accounts = Vec::with_capacity(cfg.accounts.len());
        let mut by_hash = HashMap::new();
        for a in cfg.checked_accounts()? {
            for h in a.key_hashes {
                by_hash.insert(h, accounts.len());
            }
            accounts.push(Account {
                id: a.id.to_owned(),
                plan: a.plan.to_owned(),
                searches_per_day: a.searches_per_day,
            });
        }
        Ok(Accounts {
            mode: cfg.auth.mode,
            anonymous,
            accounts,
            by_hash,
        })
    }

    /// The configured mode.
    #[must_use]
    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// The account of a request, from the raw values of its
    /// `Authorization` and `x-api-key` headers.
    ///
    /// # Errors
    /// [`AuthError`] in `keys` mode when neither carries a known key.
    pub fn authenticate(
        &self,
        authorization: Option<&[u8]>,
        x_api_key: Option<&[u8]>,
    ) -> Result<&Account, AuthError> {
        if self.mode == AuthMode::Open {
            return Ok(&self.anonymous);
        }
        let bearer = authorization.and_then(bearer_token);
        let candidates = [bearer, x_api_key.map(trim)];
        let mut seen = false;
        for key in candidates.into_iter().flatten() {
            if key.is_empty() {
                continue;
            }
            seen = true;
            let h: [u8; 32] = Sha256::digest(key).into();
            if let Some(&i) = self.by_hash.get(&h) {
                return Ok(&self.accounts[i]);
            }
        }
        Err(if seen {
            AuthError::UnknownKey
        } else {
            AuthError::MissingKey
        })
    }

    /// [`Accounts::authenticate`] on a header map.
    ///
    /// # Errors
    /// As [`Accounts::authenticate`].
    pub fn authenticate_headers(&self, headers: &http::HeaderMap) -> Result<&Account, AuthError> {
        self.authenticate(
            headers
                .get(http::header::AUTHORIZATION)
                .map(|v| v.as_bytes()),
            headers.get("x-api-key").map(|v| v.as_bytes()),
        )
    }
}

fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

/// The token of `Bearer <token>` (scheme case-insensitive).
fn bearer_token(v: &[u8]) -> Option<&[u8]> {
    let v = trim(v);
    let (scheme, rest) = v.split_at_checked(6)?;
    (scheme.eq_ignore_ascii_case(b"bearer") && rest.first() == Some(&b' ')).then(|| trim(rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &str) -> Result<Config, ConfigError> {
        Config::from_toml_with_env(extra, &|_| None)
    }

    #[test]
    fn open_mode_is_anonymous_on_default() {
        let a = Accounts::from_config(&cfg("[plans.default]\nsearches_per_day = 7\n").unwrap())
            .unwrap();
        let acct = a.authenticate(None, None).unwrap();
        assert_eq!(
            (acct.id(), acct.plan(), acct.searches_per_day()),
            ("anonymous", "default", 7)
        );
        let acct = a.authenticate(Some(b"Bearer whatever"), None).unwrap();
        assert_eq!(acct.id(), "anonymous");
    }

    #[test]
    fn keys_mode_bearer_and_x_api_key() {
        let toml = format!(
            "[auth]\nmode = \"keys\"\n[[accounts]]\nid = \"a\"\nkeys = [\"{}\", \"{}\"]\n[[accounts]]\nid = \"b\"\nkeys = [\"{}\"]\n",
            hash_key("k1"),
            hash_key("k2"),
            hash_key("k3")
        );
        let a = Accounts::from_config(&cfg(&toml).unwrap()).unwrap();
        assert_eq!(a.authenticate(Some(b"Bearer k1"), None).unwrap().id(), "a");
        assert_eq!(
            a.authenticate(Some(b"bearer  k2 "), None).unwrap().id(),
            "a"
        );
        assert_eq!(a.authenticate(None, Some(b"k3")).unwrap().id(), "b");
        assert_eq!(
            a.authenticate(Some(b"Bearer nope"), Some(b"k3"))
                .unwrap()
                .id(),
            "b"
        );
        assert_eq!(a.authenticate(None, None), Err(AuthError::MissingKey));
        assert_eq!(
            a.authenticate(Some(b"Basic k1"), None),
            Err(AuthError::MissingKey)
        );
        assert_eq!(
            a.authenticate(Some(b"Bearer"), Some(b"")),
            Err(AuthError::MissingKey)
        );
        assert_eq!(
            a.authenticate(Some(b"Bearer k4"), None),
            Err(AuthError::UnknownKey)
        );
        assert_eq!(
            a.authenticate(None, Some(b"k4")),
            Err(AuthError::UnknownKey)
        );
        assert_eq!(
            a.authenticate(None, Some(b"K1")),
            Err(AuthError::UnknownKey)
        );
        let mut h = http::HeaderMap::new();
        h.insert("x-api-key", "k1".parse().unwrap());
        assert_eq!(a.authenticate_headers(&h).unwrap().id(), "a");
    }

    #[test]
    fn config_errors_name_the_key() {
        let e = cfg("[[accounts]]\nid = \"a\"\nplan = \"gold\"\n").unwrap_err();
        assert_eq!(e.key(), "accounts[0].plan");
        let e = cfg("[[accounts]]\nid = \"a\"\nkeys = [\"plain-key\"]\n").unwrap_err();
        assert_eq!(e.key(), "accounts[0].keys[0]");
        let h = hash_key("x");
        let e = cfg(&format!(
            "[[accounts]]\nid = \"a\"\nkeys = [\"{h}\"]\n[[accounts]]\nid = \"b\"\nkeys = [\"{h}\"]\n"
        ))
        .unwrap_err();
        assert_eq!(e.key(), "accounts[1].keys[0]");
        let e = cfg("[[accounts]]\nid = \"a\"\n[[accounts]]\nid = \"a\"\n").unwrap_err();
        assert_eq!(e.key(), "accounts[1].id");
        let e = cfg("[auth]\nmode = \"keys\"\n").unwrap_err();
        assert_eq!(e.key(), "auth.mode");
    }

    #[test]
    fn hash_format() {
        assert_eq!(
            hash_key("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(crate::config::parse_key_hash(&hash_key("abc")).is_some());
        assert!(crate::config::parse_key_hash("sha256:zz").is_none());
    }
}
