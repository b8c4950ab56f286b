//! What the crate's two services share: a small pool of tokio-postgres connections to the
//! database `DATABASE_URL` names, and serving an axum router on 127.0.0.1 at the port `PORT`
//! names.

use axum::Router;
use tokio::sync::{Mutex, MutexGuard, Semaphore};
use tokio_postgres::{Client, NoTls};

/// A fixed number of connections, each lent to one request at a time.
pub struct Pool {
    clients: Vec<Mutex<Client>>,
    free: Semaphore,
}

impl Pool {
    /// `size` connections to the database `DATABASE_URL` names.
    pub async fn connect(size: usize) -> Pool {
        let url = std::env::var("DATABASE_URL").expect("DATABASE_URL names the database");
        let mut clients = Vec::new();
        for _ in 0..size {
            let (client, connection) = tokio_postgres::connect(&url, NoTls)
                .await
                .expect("the database answers");
            tokio::spawn(connection);
            clients.push(Mutex::new(client));
        }
        Pool {
            clients,
            free: Semaphore::new(size),
        }
    }

    /// A free connection, held until the guard drops.
    pub async fn connection(&self) -> MutexGuard<'_, Client> {
        let _permit = self.free.acquire().await.expect("the pool is never closed");
        loop {
            for client in &self.clients {
                if let Ok(guard) = client.try_lock() {
                    return guard;
                }
            }
            tokio::task::yield_now().await;
        }
    }
}

/// Serves `app` on 127.0.0.1 at the port `PORT` names, until the process ends.
pub async fn serve(app: Router) {
    let port: u16 = (std::env::var("PORT").ok())
        .and_then(|port| port.parse().ok())
        .expect("PORT names the port to listen on");
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the port is free");
    axum::serve(listener, app).await.expect("the service runs");
}
