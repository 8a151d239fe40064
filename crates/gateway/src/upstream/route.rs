//! `[[routes]]`: which upstream a request goes to.
//!
//! Contract:
//! * A request whose body has a top-level string `model` goes to the first
//!   route that matches it ([`RouteConfig::matches`]: exact, or a prefix
//!   ending in `*`); any other request (no route matches, no `model`, a
//!   streamed pass-through body) goes to `[upstream]`.
//! * A route's `base_urls` are taken round robin, one step per request;
//!   a retry takes the next one.
//! * A route's `api_key`, when set, replaces the key of `[upstream]`;
//!   `upstream_model`, when set, replaces the value of the body's `model`
//!   member by a splice (every other byte of the body stays as it was).
//! * `[upstream]` sends `/v1/messages` to `messages_base_url` when set.
//! * A base URL ([`Base`]) joins a request's path: a base ending in `/v1`
//!   takes the path without its own `/v1`.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use citestream_host::config::{Config, RouteConfig};
use citestream_host::errors::ErrorShape;
use http::Uri;

/// A base URL split into its parts.
#[derive(Clone, Debug)]
pub(crate) struct Base {
    pub(super) scheme: http::uri::Scheme,
    pub(super) authority: http::uri::Authority,
    /// The path without a trailing `/` (`""` for the root).
    pub(super) path: String,
}

impl Base {
    pub(super) fn parse(url: &str) -> Option<Base> {
        let uri: Uri = url.parse().ok()?;
        let p = uri.into_parts();
        let path = p
            .path_and_query
            .map(|pq| pq.path().trim_end_matches('/').to_owned())
            .unwrap_or_default();
        Some(Base {
            scheme: p.scheme?,
            authority: p.authority?,
            path,
        })
    }

    /// The upstream URI of a request's path and query.
    pub(super) fn join(&self, path_and_query: &str) -> Result<Uri, http::Error> {
        let tail = match path_and_query.strip_prefix("/v1") {
            Some(rest)
                if self.path.ends_with("/v1")
                    && (rest.is_empty() || rest.starts_with(['/', '?'])) =>
            {
                rest
            }
            _ => path_and_query,
        };
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(format!("{}{tail}", self.path))
            .build()
    }
}

/// Where a request goes and with which key.
#[derive(Debug)]
pub(crate) struct Target {
    bases: Vec<Base>,
    messages_base: Option<Base>,
    pub(crate) api_key: Option<String>,
    upstream_model: Option<String>,
    next: AtomicUsize,
}

impl Target {
    /// The first endpoint index of a request.
    pub(crate) fn first(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The endpoint of attempt index `i` for a request of `shape`.
    pub(crate) fn base(&self, shape: ErrorShape, i: usize) -> &Base {
        match (shape, &self.messages_base) {
            (ErrorShape::Anthropic, Some(m)) => m,
            _ => &self.bases[i % self.bases.len()],
        }
    }

    /// How many endpoints a request of `shape` can go to.
    pub(crate) fn endpoints(&self, shape: ErrorShape) -> usize {
        match (shape, &self.messages_base) {
            (ErrorShape::Anthropic, Some(_)) => 1,
            _ => self.bases.len(),
        }
    }
}

/// The routes and the default upstream.
#[derive(Debug)]
pub(crate) struct Routes {
    routes: Vec<(RouteConfig, Target)>,
    default: Target,
}

fn key(k: &str) -> Option<String> {
    (!k.is_empty()).then(|| k.to_owned())
}

impl Routes {
    /// The routes of `cfg` (its URLs were validated with the config).
    pub(crate) fn new(cfg: &Config) -> Result<Routes, String> {
        let up = &cfg.upstream;
        let base = |u: &str, k: &str| Base::parse(u).ok_or_else(|| format!("{k}: invalid URL"));
        let default = Target {
            bases: vec![base(&up.base_url, "upstream.base_url")?],
            messages_base: match up.messages_base_url.as_str() {
                "" => None,
                u => Some(base(u, "upstream.messages_base_url")?),
            },
            api_key: key(&up.api_key),
            upstream_model: None,
            next: AtomicUsize::new(0),
        };
        let mut routes = Vec::with_capacity(cfg.routes.len());
        for (i, r) in cfg.routes.iter().enumerate() {
            let bases = r
                .base_urls
                .iter()
                .enumerate()
                .map(|(j, u)| base(u, &format!("routes[{i}].base_urls[{j}]")))
                .collect::<Result<Vec<_>, _>>()?;
            routes.push((
                r.clone(),
                Target {
                    bases,
                    messages_base: None,
                    api_key: key(&r.api_key).or_else(|| default.api_key.clone()),
                    upstream_model: key(&r.upstream_model),
                    next: AtomicUsize::new(0),
                },
            ));
        }
        Ok(Routes { routes, default })
    }

    /// The default upstream.
    pub(crate) fn default_target(&self) -> &Target {
        &self.default
    }

    /// The target of a request with this whole body, and the body to send
    /// (its `model` rewritten when the route says so).
    pub(crate) fn pick(&self, body: &Bytes) -> (&Target, Bytes) {
        if self.routes.is_empty() {
            return (&self.default, body.clone());
        }
        let Some((model, span)) = model_of(body) else {
            return (&self.default, body.clone());
        };
        let Some((_, t)) = self.routes.iter().find(|(r, _)| r.matches(&model)) else {
            return (&self.default, body.clone());
        };
        let body = match &t.upstream_model {
            Some(m) => splice(body, span, m),
            None => body.clone(),
        };
        (t, body)
    }
}

/// The body's top-level `model` string and the span of its value.
fn model_of(body: &[u8]) -> Option<(String, Range<usize>)> {
    let span = citestream::request::member_span(body, "model")?;
    let model: String = serde_json::from_slice(&body[span.clone()]).ok()?;
    Some((model, span))
}

/// `body` with `span` replaced by the JSON string `value`.
fn splice(body: &Bytes, span: Range<usize>, value: &str) -> Bytes {
    let lit = serde_json::to_string(value).unwrap_or_else(|_| "\"\"".to_owned());
    let mut out = Vec::with_capacity(body.len() + lit.len());
    out.extend_from_slice(&body[..span.start]);
    out.extend_from_slice(lit.as_bytes());
    out.extend_from_slice(&body[span.end..]);
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(toml: &str) -> Config {
        Config::from_toml_with_env(toml, &|_| None).unwrap()
    }

    const ROUTES: &str = r#"
[upstream]
base_url = "http://default:1"
api_key = "up"
[[routes]]
model = "shannon-*"
base_urls = ["http://a:1", "http://b:1"]
upstream_model = "shannon-7b-instruct"
[[routes]]
model = "gpt-4o"
base_urls = ["http://c:1"]
api_key = "route"
[[routes]]
model = "shannon-x"
base_urls = ["http://never:1"]
"#;

    #[test]
    fn first_match_wins_and_the_model_is_spliced() {
        let r = Routes::new(&cfg(ROUTES)).unwrap();
        let body =
            Bytes::from_static(br#"{ "model" : "shannon-x", "messages":[{"content":"model"}]}"#);
        let (t, out) = r.pick(&body);
        assert_eq!(t.bases.len(), 2);
        assert_eq!(t.api_key.as_deref(), Some("up"));
        assert_eq!(
            &out[..],
            br#"{ "model" : "shannon-7b-instruct", "messages":[{"content":"model"}]}"#
        );
        let (t, out) = r.pick(&Bytes::from_static(br#"{"model":"gpt-4o"}"#));
        assert_eq!(t.api_key.as_deref(), Some("route"));
        assert_eq!(&out[..], br#"{"model":"gpt-4o"}"#);
        // Escaped names are decoded before matching.
        let (t, _) = r.pick(&Bytes::from_static(br#"{"model":"gpt\u002d4o"}"#));
        assert_eq!(t.api_key.as_deref(), Some("route"));
    }

    #[test]
    fn no_match_goes_to_the_default() {
        let r = Routes::new(&cfg(ROUTES)).unwrap();
        for b in [
            &br#"{"model":"gpt-4o-mini"}"#[..],
            br#"{"model":"shannon"}"#,
            br#"{"model":7}"#,
            br#"{"messages":[]}"#,
            br#"not json"#,
            br#"{"model":"shannon-x""#,
        ] {
            let body = Bytes::copy_from_slice(b);
            let (t, out) = r.pick(&body);
            assert!(std::ptr::eq(t, r.default_target()), "{b:?}");
            assert_eq!(out, body);
        }
    }

    #[test]
    fn endpoints_round_robin() {
        let r = Routes::new(&cfg(ROUTES)).unwrap();
        let (t, _) = r.pick(&Bytes::from_static(br#"{"model":"shannon-1"}"#));
        let seen: Vec<String> = (0..4)
            .map(|_| t.base(ErrorShape::OpenAi, t.first()).authority.to_string())
            .collect();
        assert_eq!(seen, ["a:1", "b:1", "a:1", "b:1"]);
    }
}
