-- postgrest-js's test database (packages/core/postgrest-js/test/supabase/) on SQLite: the same
-- tables, keys (under PostgreSQL's names), views and rows. What SQLite has no type for is kept as
-- text: int4range, tsvector, the user_status enum, arrays and PostGIS geometry. The `personal`
-- schema, partitions and the functions that take a row or are overloaded have no counterpart.

CREATE TABLE users (
  username TEXT PRIMARY KEY,
  data JSON DEFAULT NULL,
  age_range TEXT DEFAULT NULL,
  status TEXT DEFAULT 'ONLINE' CHECK (status IN ('ONLINE', 'OFFLINE')),
  catchphrase TEXT DEFAULT NULL
);
CREATE TABLE user_profiles (
  id INTEGER PRIMARY KEY,
  username TEXT,
  CONSTRAINT user_profiles_username_fkey FOREIGN KEY (username) REFERENCES users (username)
);
CREATE TABLE best_friends (
  id INTEGER PRIMARY KEY,
  first_user TEXT NOT NULL,
  second_user TEXT NOT NULL,
  third_wheel TEXT,
  CONSTRAINT best_friends_first_user_fkey FOREIGN KEY (first_user) REFERENCES users (username),
  CONSTRAINT best_friends_second_user_fkey FOREIGN KEY (second_user) REFERENCES users (username),
  CONSTRAINT best_friends_third_wheel_fkey FOREIGN KEY (third_wheel) REFERENCES users (username)
);
CREATE TABLE channels (id INTEGER PRIMARY KEY, data JSON DEFAULT NULL, slug TEXT);
CREATE TABLE channel_details (
  id INTEGER PRIMARY KEY,
  details TEXT DEFAULT NULL,
  CONSTRAINT channel_details_id_fkey FOREIGN KEY (id) REFERENCES channels (id)
);
CREATE TABLE messages (
  id INTEGER PRIMARY KEY,
  data JSON DEFAULT NULL,
  message TEXT,
  username TEXT NOT NULL,
  channel_id INTEGER NOT NULL,
  CONSTRAINT messages_username_fkey FOREIGN KEY (username) REFERENCES users (username),
  CONSTRAINT messages_channel_id_fkey FOREIGN KEY (channel_id) REFERENCES channels (id)
);
CREATE TABLE users_audit (
  id INTEGER PRIMARY KEY,
  created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
  previous_value BIGINT
);
CREATE TABLE collections (
  id INTEGER PRIMARY KEY,
  description TEXT,
  parent_id BIGINT,
  CONSTRAINT collections_parent_id_fkey FOREIGN KEY (parent_id) REFERENCES collections (id)
);
CREATE TABLE products (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  description TEXT,
  price NUMERIC(10, 2) NOT NULL
);
CREATE TABLE categories (id INTEGER PRIMARY KEY, name TEXT NOT NULL, description TEXT);
CREATE TABLE product_categories (
  product_id BIGINT,
  category_id BIGINT,
  PRIMARY KEY (product_id, category_id),
  CONSTRAINT product_categories_product_id_fkey FOREIGN KEY (product_id) REFERENCES products (id) ON DELETE CASCADE,
  CONSTRAINT product_categories_category_id_fkey FOREIGN KEY (category_id) REFERENCES categories (id) ON DELETE CASCADE
);
CREATE TABLE shops (id INTEGER PRIMARY KEY, address TEXT, shop_geom TEXT);
CREATE VIEW non_updatable_view AS SELECT username FROM users LIMIT 1;
CREATE VIEW updatable_view AS SELECT username, 1 AS non_updatable_column FROM users;
CREATE TABLE cornercase (id INTEGER PRIMARY KEY, "column whitespace" TEXT, array_column JSON);
CREATE VIEW active_users AS SELECT * FROM users WHERE status = 'ONLINE';
CREATE VIEW recent_messages AS SELECT * FROM messages ORDER BY id DESC LIMIT 100;
CREATE TABLE events (
  id INTEGER NOT NULL,
  created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  event_type TEXT,
  data JSON,
  PRIMARY KEY (id, created_at)
);
CREATE TABLE hotel (id INTEGER PRIMARY KEY, name TEXT NULL);
CREATE TABLE booking (
  id INTEGER PRIMARY KEY,
  hotel_id BIGINT,
  CONSTRAINT booking_hotel_id_fkey FOREIGN KEY (hotel_id) REFERENCES hotel (id)
);

INSERT INTO users (username, status, age_range, catchphrase, data) VALUES
  ('supabot', 'ONLINE', '[1,2)', '''cat'' ''fat''', NULL),
  ('kiwicopple', 'OFFLINE', '[25,35)', '''bat'' ''cat''', NULL),
  ('awailas', 'ONLINE', '[25,35)', '''bat'' ''rat''', NULL),
  ('dragarcia', 'ONLINE', '[20,30)', '''fat'' ''rat''', NULL),
  ('jsonuser', 'ONLINE', '[20,30)', '''json'' ''test''',
   '{"foo": {"bar": {"nested": "value"}, "baz": "string value"}}');
INSERT INTO channels (slug) VALUES ('public'), ('random'), ('other');
INSERT INTO messages (message, channel_id, username) VALUES
  ('Hello World 👋', 1, 'supabot'),
  ('Perfection is attained, not when there is nothing more to add, but when there is nothing left to take away.', 2, 'supabot'),
  ('Some message on channel without details', 3, 'supabot'),
  ('Some message on channel without details', 3, 'supabot');
INSERT INTO shops (id, address, shop_geom) VALUES (1, '1369 Cambridge St', 'SRID=4326;POINT(-71.10044 42.373695)');
INSERT INTO channel_details (id, details) VALUES (1, 'Details for public channel'), (2, 'Details for random channel');
INSERT INTO user_profiles (id, username) VALUES (1, 'supabot'), (2, NULL);
INSERT INTO best_friends (id, first_user, second_user, third_wheel) VALUES
  (1, 'supabot', 'kiwicopple', 'awailas'), (2, 'supabot', 'awailas', NULL);
INSERT INTO collections (id, description, parent_id) VALUES
  (1, 'Root Collection', NULL), (2, 'Child of Root', 1), (3, 'Another Child of Root', 1),
  (4, 'Grandchild', 2), (5, 'Sibling of Grandchild', 2), (6, 'Child of Another Root', 3);
INSERT INTO products (id, name, description, price) VALUES
  (1, 'Laptop', 'High-performance laptop', 999.99),
  (2, 'Smartphone', 'Latest model smartphone', 699.99),
  (3, 'Headphones', 'Noise-cancelling headphones', 199.99);
INSERT INTO categories (id, name, description) VALUES
  (1, 'Electronics', 'Electronic devices and gadgets'),
  (2, 'Computers', 'Computer and computer accessories'),
  (3, 'Audio', 'Audio equipment');
INSERT INTO product_categories (product_id, category_id) VALUES (1, 1), (1, 2), (2, 1), (3, 1), (3, 3);
INSERT INTO cornercase (id, array_column) VALUES (1, '["test", "one"]'), (2, '["another"]'), (3, '["test2"]');
INSERT INTO hotel (id, name) VALUES (1, 'Sunset Resort'), (2, 'Mountain View Hotel'), (3, 'Beachfront Inn'), (4, NULL);
INSERT INTO booking (id, hotel_id) VALUES (1, 1), (2, 1), (3, 2), (4, NULL), (5, 3), (6, 1), (7, NULL), (8, 4);
INSERT INTO users_audit (id, previous_value) VALUES (1, 42), (2, 42), (3, 42), (4, 42), (5, 42);
INSERT INTO events (id, created_at, event_type, data) VALUES
  (1, '2024-06-15 00:00:00', 'login', '{"user": "alice"}'),
  (2, '2025-03-20 00:00:00', 'logout', '{"user": "bob"}');
