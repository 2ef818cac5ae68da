//! The kube source against the embedded API server: no subscription string changes which
//! resource a request reads.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};

use super::*;

async fn config_map(client: &kube::Client, name: &str, app: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app".to_string(), app.to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &cm).await.unwrap();
}

fn names(page: &ListPage) -> Vec<String> {
    let mut n: Vec<String> = page
        .items
        .iter()
        .map(|o| {
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    n.sort();
    n
}

#[tokio::test]
async fn subscription_strings_stay_inside_their_request() {
    let server = apiserver::ApiServer::start(apiserver::Config::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    for (name, app) in [("a", "x"), ("b", "y"), ("c", "z")] {
        config_map(&client, name, app).await;
    }
    let source = KubeSourceFactory::new(client.clone());
    let cm = || InformerKey::new("v1", "ConfigMap");

    // Path injection (the namespace and apiVersion are pasted into paths) is refused before
    // any request.
    let lists_before = server.stats().lists;
    for (key, field) in [
        (cm().in_namespace("kube-system/secrets?x="), "namespace"),
        (cm().in_namespace(".."), "namespace"),
        (
            InformerKey::new("v1/namespaces/kube-system/secrets", "Secret"),
            "api-version",
        ),
    ] {
        match source.lister_watcher(&key).await {
            Err(InformerError::InvalidKey(e)) => assert_eq!(e.field, field, "{e}"),
            Err(e) => panic!("{key}: {e}"),
            Ok(_) => panic!("{key}: accepted"),
        }
    }
    assert_eq!(server.stats().lists, lists_before);

    // Query values are form-encoded: `&` stays inside the field selector's value, and the set
    // syntax (spaces, parentheses, commas) reaches the server intact.
    let lw = source
        .lister_watcher(
            &cm()
                .in_namespace("default")
                .with_fields("metadata.name=a&labelSelector"),
        )
        .await
        .unwrap();
    assert!(names(&lw.list(&ListOptions::default()).await.unwrap()).is_empty());
    let lw = source
        .lister_watcher(&cm().in_namespace("default").with_labels("app in (x, y)"))
        .await
        .unwrap();
    assert_eq!(
        names(&lw.list(&ListOptions::default()).await.unwrap()),
        ["a", "b"]
    );
    server.shutdown().await;
}
