//! [`ActingAs`]: whose identity a plugin's requests carry, and the one place the
//! `Impersonate-User` header is put on them.
//!
//! A plugin's `kube` calls and its Events share it, so both reach the API server under the
//! same name. It fails closed: when the host was asked to run every plugin under an account
//! of its own and that account's name cannot be sent, the request is refused, never sent
//! under the host's identity instead.

/// The header a request names the user it acts as with (the API server checks the sender's
/// `impersonate` permission on that ServiceAccount).
pub(crate) const IMPERSONATE_USER: &str = "impersonate-user";

/// Whose identity one plugin's requests carry.
#[derive(Clone, Debug)]
pub(crate) enum ActingAs {
    /// The host's own (`--plugin-identity host`): nothing is added.
    Host,
    /// The plugin's own ServiceAccount, as this `Impersonate-User` value.
    Plugin(http::HeaderValue),
    /// The plugin was to act as this user, which is no valid header value: every request is
    /// refused.
    Unusable(String),
}

/// A request that could not be given the plugin's identity and so must not be sent.
#[derive(Debug, thiserror::Error)]
#[error(
    "refused: the plugin's identity {user:?} cannot be sent as an Impersonate-User header, \
     and the call is not sent under the host's identity instead"
)]
pub(crate) struct UnusableIdentity {
    /// The user name the plugin was to act as.
    pub(crate) user: String,
}

impl ActingAs {
    /// The identity of a plugin whose calls impersonate `user`, or the host's when `None`.
    pub(crate) fn user(user: Option<String>) -> Self {
        match user {
            None => ActingAs::Host,
            Some(u) => match http::HeaderValue::from_str(&u) {
                Ok(v) => ActingAs::Plugin(v),
                Err(_) => ActingAs::Unusable(u),
            },
        }
    }

    /// `Err` when the plugin's requests cannot carry its identity (checked before any work).
    pub(crate) fn usable(&self) -> Result<(), UnusableIdentity> {
        match self {
            ActingAs::Unusable(user) => Err(UnusableIdentity { user: user.clone() }),
            _ => Ok(()),
        }
    }

    /// Puts the plugin's identity on `request`; on `Err` the request must not be sent.
    pub(crate) fn mark<B>(&self, request: &mut http::Request<B>) -> Result<(), UnusableIdentity> {
        self.usable()?;
        if let ActingAs::Plugin(user) = self {
            request.headers_mut().insert(
                http::HeaderName::from_static(IMPERSONATE_USER),
                user.clone(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> http::Request<Vec<u8>> {
        http::Request::get("/api/v1/namespaces/a/configmaps/b")
            .body(Vec::new())
            .unwrap()
    }

    #[test]
    fn a_plugin_account_is_one_header_and_the_host_adds_none() {
        let mut r = request();
        ActingAs::user(Some("system:serviceaccount:ops:kubewasm-plugin-p".into()))
            .mark(&mut r)
            .unwrap();
        assert_eq!(
            r.headers()[IMPERSONATE_USER],
            "system:serviceaccount:ops:kubewasm-plugin-p"
        );
        let mut r = request();
        ActingAs::user(None).mark(&mut r).unwrap();
        assert!(r.headers().is_empty());
    }

    /// The header used to be built with `HeaderValue::from_str(..).ok()`: a user name that is
    /// no valid header value (here a namespace with a control character) left the header off,
    /// and the call went out under the host's identity with all of the host's rights.
    #[test]
    fn an_identity_that_cannot_be_sent_refuses_the_request_rather_than_act_as_the_host() {
        for bad in [
            "system:serviceaccount:ops\n:kubewasm-plugin-p",
            "system:serviceaccount:o\u{7f}ps:kubewasm-plugin-p",
        ] {
            let acting = ActingAs::user(Some(bad.into()));
            assert!(acting.usable().is_err(), "{bad:?}");
            let mut r = request();
            let e = acting.mark(&mut r).unwrap_err();
            assert!(r.headers().is_empty());
            let shown = e.to_string();
            assert!(
                shown.contains("not sent under the host's identity") && !shown.contains('\n'),
                "{shown}"
            );
        }
    }
}
