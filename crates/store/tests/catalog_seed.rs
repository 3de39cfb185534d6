//! Seeding the catalog: new models are added with their prices; on a later start the definitions of
//! known models follow the binary's catalog while the operator's switches, caps and prices stay.

use domain::ports::ModelStore;
use domain::{ModelKind, ModelSeed};
use store::Store;

async fn open() -> Store {
    let dir = std::env::temp_dir().join(format!("gw-seed-{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()));
    Store::open(&format!("sqlite://{}/gw.db?mode=rwc", dir.display())).await.expect("store")
}

fn seed(definition: &str) -> ModelSeed {
    let def = catalog::Catalog::builtin().expect("catalog").get("AudioGen-1.0").cloned().expect("model");
    ModelSeed { definition: definition.to_owned(), ..def.seed() }
}

#[tokio::test]
async fn a_second_seed_refreshes_definitions_and_keeps_operator_changes() {
    let store = open().await;
    let original = seed("{\"v\":1}");
    assert_eq!(store.seed_models(vec![original.clone()]).await.expect("seed"), 1);
    store.set_model("AudioGen-1.0", Some(false), Some(7)).await.expect("operator change");
    let price = store.models().await.expect("models")[0].pricing.clone().expect("priced");
    assert_eq!(store.seed_models(vec![seed("{\"v\":2}")]).await.expect("seed again"), 0, "nothing new");
    let after = store.models().await.expect("models");
    let model = after.iter().find(|m| m.name == "AudioGen-1.0").expect("kept");
    assert_eq!(model.definition, "{\"v\":2}", "the definition follows the catalog");
    assert_eq!((model.enabled, model.concurrency_limit, model.kind), (false, 7, ModelKind::Audio));
    assert_eq!(model.pricing.as_ref(), Some(&price), "the price version is kept");
}

#[tokio::test]
async fn every_price_version_stays_readable() {
    let store = open().await;
    store.seed_models(vec![seed("{}")]).await.expect("seed");
    let first = store.pricing_version("AudioGen-1.0", 1).await.expect("read").expect("version 1");
    let mut sheet = first.sheet.clone();
    if let Some(rate) = sheet.rates.values_mut().next() {
        rate.amount_microusd += 1;
    }
    let second = store.set_price("AudioGen-1.0", sheet).await.expect("new version");
    assert_eq!(second.version, 2);
    assert_eq!(store.pricing_version("AudioGen-1.0", 1).await.expect("read"), Some(first), "history is kept");
    assert_eq!(store.pricing_version("AudioGen-1.0", 2).await.expect("read"), Some(second));
    assert_eq!(store.pricing_version("AudioGen-1.0", 3).await.expect("read"), None);
    assert_eq!(store.pricing_version("nope", 1).await.expect("read"), None);
}

#[tokio::test]
async fn the_first_shared_secret_is_kept() {
    let store = open().await;
    assert_eq!(store.shared_secret("links", "first").await.expect("secret"), "first");
    assert_eq!(store.shared_secret("links", "second").await.expect("secret"), "first", "every replica gets the first");
    assert_eq!(store.shared_secret("other", "x").await.expect("secret"), "x");
}
