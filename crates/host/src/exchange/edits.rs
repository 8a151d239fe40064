//! [`HeaderEdits`]: the header changes an exchange decides, applied by each
//! host in one place (`citestream serve` onto an [`http::HeaderMap`] with
//! [`HeaderEdits::apply`]; `citestream ext-proc` as one Envoy
//! `HeaderMutation`).
//!
//! Contract: a name is either set or removed, never both (a later call
//! for the same name replaces the earlier one), so the edits mean the same
//! whatever order a host applies sets and removals in. Setting replaces
//! every value the name had.

use http::{HeaderMap, HeaderName, HeaderValue};

/// Header changes (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderEdits {
    set: Vec<(HeaderName, HeaderValue)>,
    remove: Vec<HeaderName>,
}

impl HeaderEdits {
    /// Sets `name` to `value`, replacing any value it had.
    pub fn set(&mut self, name: HeaderName, value: HeaderValue) -> &mut Self {
        self.remove.retain(|n| *n != name);
        self.set.retain(|(n, _)| *n != name);
        self.set.push((name, value));
        self
    }

    /// Sets `name` to a value built from text; a value HTTP refuses is
    /// skipped (the values the exchange builds never are).
    pub fn set_str(&mut self, name: HeaderName, value: &str) -> &mut Self {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.set(name, v);
        }
        self
    }

    /// Removes `name`.
    pub fn remove(&mut self, name: HeaderName) -> &mut Self {
        self.set.retain(|(n, _)| *n != name);
        if !self.remove.contains(&name) {
            self.remove.push(name);
        }
        self
    }

    /// The headers to set, in the order they were set.
    pub fn sets(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        self.set.iter().map(|(n, v)| (n, v))
    }

    /// The headers to remove.
    pub fn removals(&self) -> impl Iterator<Item = &HeaderName> {
        self.remove.iter()
    }

    /// The value `name` is set to, if it is.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&HeaderValue> {
        self.set.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Whether `name` is removed.
    #[must_use]
    pub fn removes(&self, name: &str) -> bool {
        self.remove.iter().any(|n| n == name)
    }

    /// No change at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.remove.is_empty()
    }

    /// Adds `other`'s changes after these.
    pub fn extend(&mut self, other: HeaderEdits) -> &mut Self {
        for n in other.remove {
            self.remove(n);
        }
        for (n, v) in other.set {
            self.set(n, v);
        }
        self
    }

    /// Applies the changes to `h`.
    pub fn apply(&self, h: &mut HeaderMap) {
        for n in &self.remove {
            h.remove(n);
        }
        for (n, v) in &self.set {
            h.insert(n.clone(), v.clone());
        }
    }

    /// [`HeaderEdits::apply`], consuming the edits: no name or value is
    /// cloned (a host's per-request path).
    pub fn apply_owned(self, h: &mut HeaderMap) {
        for n in self.remove {
            h.remove(n);
        }
        for (n, v) in self.set {
            h.insert(n, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;

    #[test]
    fn set_and_remove_exclude_each_other() {
        let mut e = HeaderEdits::default();
        e.remove(header::AUTHORIZATION)
            .set_str(header::AUTHORIZATION, "Bearer k")
            .set_str(header::CONTENT_LENGTH, "3")
            .remove(header::CONTENT_LENGTH);
        assert_eq!(e.get("authorization").unwrap(), "Bearer k");
        assert!(!e.removes("authorization"));
        assert!(e.removes("content-length"));
        assert!(e.get("content-length").is_none());
        let mut h = HeaderMap::new();
        h.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer a"));
        h.append(header::AUTHORIZATION, HeaderValue::from_static("Bearer b"));
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("9"));
        let mut owned = h.clone();
        e.apply(&mut h);
        assert_eq!(h.get_all(header::AUTHORIZATION).iter().count(), 1);
        assert_eq!(h[header::AUTHORIZATION], "Bearer k");
        assert!(h.get(header::CONTENT_LENGTH).is_none());
        e.apply_owned(&mut owned);
        assert_eq!(owned, h, "the same either way");
    }
}
