//! `ResponseOwners`: the response ids the response-style endpoint returned, and to whom.

use async_trait::async_trait;
use domain::ports::{ResponseOwners, StoreError};
use domain::{TaskId, UserId};
use sea_orm::sea_query::OnConflict;
use sea_orm::{ActiveValue::Set, EntityTrait};

use crate::entities::native_responses as responses;
use crate::{Store, backend_err};

#[async_trait]
impl ResponseOwners for Store {
    async fn record_response(&self, response_id: &str, user: &UserId, task: &TaskId) -> Result<(), StoreError> {
        responses::Entity::insert(responses::ActiveModel {
            response_id: Set(response_id.to_owned()),
            user_id: Set(user.0.clone()),
            task_id: Set(task.0.clone()),
            created_at: Set(self.now()),
        })
        .on_conflict(OnConflict::column(responses::Column::ResponseId).do_nothing().to_owned())
        .exec_without_returning(self.db.writes())
        .await
        .map_err(backend_err)?;
        Ok(())
    }

    async fn response_owner(&self, response_id: &str) -> Result<Option<UserId>, StoreError> {
        let row =
            responses::Entity::find_by_id(response_id.to_owned()).one(self.db.reads()).await.map_err(backend_err)?;
        Ok(row.map(|r| UserId(r.user_id)))
    }
}
