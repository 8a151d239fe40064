//! The HTTP client of every remote call of this crate (the remote search
//! providers; the query model uses it too): reqwest with rustls.
//!
//! Contract:
//! * [`client`]: TLS trust from the host's [`rustls::ClientConfig`] when
//!   given (the `[tls]` roots and client certificate), else reqwest's
//!   bundled roots; `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` (and their
//!   lower-case forms) honoured, as reqwest does by default; idle pooled
//!   connections kept [`POOL_IDLE`] (below the 5 s keep-alive of uvicorn and
//!   most servers, so the pool rarely holds one the server is closing).
//! * [`send`]: sends a request, and sends it once more when the connection
//!   broke before any byte of the answer (the server closed a kept-alive
//!   connection just as the request went out: the keep-alive race). A
//!   connect error, a timeout or any answer is returned as it is. Search
//!   and query-model calls read nothing on the server's side, so sending
//!   one again is safe. Each resend is counted in the [`Resends`] the
//!   client was built with (the host hands its own in and reads it at
//!   scrape; the crate itself exports nothing).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::{Client, RequestBuilder, Response};

/// How long an idle pooled connection is kept.
pub(crate) const POOL_IDLE: Duration = Duration::from_secs(4);

/// How many requests the search's HTTP clients sent once more on a fresh
/// connection, by who sent them: a request that failed on a reused pooled
/// connection before any byte of the answer (the server closed it just as
/// the request went out, the keep-alive race) is sent again once. Clones
/// share the counts: a host makes one, hands it to
/// [`crate::Search::with_tls_and_resends`] (again on every reload, so the
/// counts go on) and reads it when it exports its metrics.
#[derive(Clone, Debug, Default)]
pub struct Resends {
    provider: Arc<AtomicU64>,
    query_model: Arc<AtomicU64>,
}

impl Resends {
    /// Requests to a remote search provider sent again.
    #[must_use]
    pub fn provider(&self) -> u64 {
        self.provider.load(Ordering::Relaxed)
    }

    /// Requests to the query model (`search.query = "model"`) sent again.
    #[must_use]
    pub fn query_model(&self) -> u64 {
        self.query_model.load(Ordering::Relaxed)
    }

    /// The counter of `caller`'s client.
    pub(crate) fn counter(&self, caller: Caller) -> Arc<AtomicU64> {
        match caller {
            Caller::Provider => self.provider.clone(),
            Caller::QueryModel => self.query_model.clone(),
        }
    }
}

/// Who a client's requests are for (which [`Resends`] count they add to).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Caller {
    /// A remote search provider.
    Provider,
    /// The query model.
    QueryModel,
}

/// The clients of one remote: `pooled` for every request, `fresh` (no
/// idle connections kept) for the one resend of [`send`], so the resend
/// never lands on another pooled connection the server is closing.
#[derive(Clone, Debug)]
pub(crate) struct HttpClient {
    /// Keeps idle connections [`POOL_IDLE`].
    pub(crate) pooled: Client,
    fresh: Client,
    /// Counts the resends of [`send`].
    resent: Arc<AtomicU64>,
}

/// The clients of one remote, with the host's TLS trust, counting their
/// resends in `resends` under `caller`.
pub(crate) fn client(
    tls: Option<&Arc<rustls::ClientConfig>>,
    resends: &Resends,
    caller: Caller,
) -> reqwest::Result<HttpClient> {
    let build = |idle_per_host: usize| {
        let mut b = Client::builder()
            .user_agent(concat!("citestream/", env!("CARGO_PKG_VERSION")))
            .pool_idle_timeout(POOL_IDLE)
            .pool_max_idle_per_host(idle_per_host);
        if let Some(cfg) = tls {
            b = b.use_preconfigured_tls((**cfg).clone());
        }
        b.build()
    };
    Ok(HttpClient {
        pooled: build(usize::MAX)?,
        fresh: build(0)?,
        resent: resends.counter(caller),
    })
}

/// Sends `req` (built on `client.pooled`); once more, on a fresh
/// connection, when the connection broke before the answer.
pub(crate) async fn send(client: &HttpClient, req: RequestBuilder) -> reqwest::Result<Response> {
    let again = req.try_clone().map(RequestBuilder::build);
    match req.send().await {
        Err(e) if closed_before_answer(&e) => match again {
            Some(Ok(r)) => {
                tracing::debug!(error = %e, "connection closed before the answer; sending again");
                client.resent.fetch_add(1, Ordering::Relaxed);
                client.fresh.execute(r).await
            }
            _ => Err(e),
        },
        r => r,
    }
}

/// A request error where the peer closed or reset the connection before
/// any byte of the answer was parsed.
fn closed_before_answer(e: &reqwest::Error) -> bool {
    if e.is_connect() || e.is_timeout() || !e.is_request() {
        return false;
    }
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            return h.is_incomplete_message() || h.is_canceled() || h.is_closed();
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            return matches!(
                io.kind(),
                K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof
            );
        }
        src = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers the first request of each connection (keeping
    /// it open, no `connection: close`) and closes the connection when the
    /// second request arrives, without answering it. Counts the answers
    /// and the requests closed under.
    async fn closing_server() -> (String, Arc<AtomicU32>, Arc<AtomicU32>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/search", l.local_addr().unwrap());
        let answered = Arc::new(AtomicU32::new(0));
        let closed = Arc::new(AtomicU32::new(0));
        let (a, cl) = (answered.clone(), closed.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let (a, cl) = (a.clone(), cl.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    for n in 0.. {
                        // Read one request head (these requests have no body).
                        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            let mut c = [0u8; 4096];
                            match s.read(&mut c).await {
                                Ok(0) | Err(_) => return,
                                Ok(k) => buf.extend_from_slice(&c[..k]),
                            }
                        }
                        buf.clear();
                        if n == 1 {
                            cl.fetch_add(1, Ordering::Relaxed);
                            return; // closed under the request
                        }
                        a.fetch_add(1, Ordering::Relaxed);
                        let body = b"[]";
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            body.len()
                        );
                        let _ = s.write_all(head.as_bytes()).await;
                        let _ = s.write_all(body).await;
                    }
                });
            }
        });
        (url, answered, closed)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_on_a_connection_closed_under_it_is_sent_again() {
        let (url, answered, closed) = closing_server().await;
        let resends = Resends::default();
        let c = client(None, &resends, Caller::QueryModel).unwrap();
        for i in 0..20 {
            let r = send(&c, c.pooled.get(&url)).await;
            let r = r.unwrap_or_else(|e| panic!("request {i}: {e}"));
            assert_eq!(r.status(), 200);
            assert_eq!(r.bytes().await.unwrap(), "[]");
        }
        assert_eq!(answered.load(Ordering::Relaxed), 20);
        // Each request closed under was sent again once, and counted
        // under the client's caller only.
        let closed = u64::from(closed.load(Ordering::Relaxed));
        assert!(closed >= 1);
        assert_eq!((resends.query_model(), resends.provider()), (closed, 0));
        // Without the second try the same pattern fails.
        let (url, _, _) = closing_server().await;
        let c = client(None, &Resends::default(), Caller::Provider).unwrap();
        c.pooled
            .get(&url)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert!(c.pooled.get(&url).send().await.is_err());
    }
}
