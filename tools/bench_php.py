"""minibase against php-crud-api in `make bench`: what this niche would otherwise put on the same
server, a single PHP file (api.php) over MySQL under nginx + PHP-FPM with opcache, on the same
MariaDB table. Key reads, 50-row lists and inserts, requests/s and CPU per request: the server's
processes plus MariaDB's, read from /proc of the PIDs the bench started (minibase with WORKERS=2).

api.php comes from BENCH_PHP_CRUD_API (a path), else from php-crud-api's repository at
PHP_CRUD_API_TAG; the rows are skipped, with a line saying why, without php-fpm or api.php.
nginx and php-fpm run as processes of the bench's own, on 127.0.0.1, with a configuration written
to a temporary directory, and are stopped by PID."""

import os
import shutil
from pathlib import Path

import requests

from tools.servers import LOGS, free_port, spawn, start_minibase, stop, wait_until_up

PHP_CRUD_API_TAG = "v2.16.2"
PHP_CRUD_API_URL = f"https://raw.githubusercontent.com/mevdschee/php-crud-api/{PHP_CRUD_API_TAG}/api.php"
PHP_CHILDREN = int(os.environ.get("BENCH_PHP_CHILDREN", "8"))  # PHP-FPM's static pool
SECONDS = float(os.environ.get("BENCH_SECONDS", "5"))  # a figure, each side
ROUNDS = 3  # the turns the two sides take, TURN seconds each
TURN = max(1, round(SECONDS / ROUNDS))  # wrk takes whole seconds only
PHP_USER, PHP_PASSWORD = "php", "php-bench-password"  # api.php's config wants a password

TABLES_TOML = """
[tables.items]
select = "anon"
insert = "anon"
"""
ROW = '{"name":"new item","location":"Oslo","price":1.5,"owner_id":7}'
# The list both answer with the same rows: php-crud-api's `cs` (contains) is a LIKE under the column's
# own collation, which ignores case, so minibase's is `ilike`; its `like` is case-sensitive, as
# PostgREST's, matches fewer rows and so scans more of the index for a page (tools/profile_writes.py).
LIST_QUERY = "location=ilike.*lo*&id=gt.100&order=name&limit=50"
INSERT_SCRIPT = """
wrk.method = "POST"
wrk.body = '%s'
wrk.headers["Content-Type"] = "application/json"
%s
"""

FPM_CONF = """
[global]
pid = {dir}/php-fpm.pid
error_log = {dir}/php-fpm.log
daemonize = no
[bench]
{user}
listen = {dir}/php-fpm.sock
pm = static
pm.max_children = {children}
clear_env = yes
env[PHP_CRUD_API_ADDRESS] = 127.0.0.1
env[PHP_CRUD_API_PORT] = {port}
env[PHP_CRUD_API_USERNAME] = {username}
env[PHP_CRUD_API_PASSWORD] = {password}
env[PHP_CRUD_API_DATABASE] = {database}
env[PHP_CRUD_API_CACHE_PATH] = {dir}/cache
"""

# php-crud-api's README's nginx site, on a port of 127.0.0.1, with an access log as a site has.
NGINX_CONF = """
{user}
worker_processes auto;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log;
events {{ worker_connections 1024; }}
http {{
    access_log {dir}/nginx-access.log;
    client_body_temp_path {dir}/body;
    fastcgi_temp_path {dir}/fastcgi;
    proxy_temp_path {dir}/proxy;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/www;
        location ~ [^/]\\.php(/|$) {{
            fastcgi_split_path_info ^(.+\\.php)(/.+)$;
            try_files $fastcgi_script_name =404;
            set $path_info $fastcgi_path_info;
            fastcgi_param PATH_INFO $path_info;
            fastcgi_index index.php;
            include /etc/nginx/fastcgi.conf;
            fastcgi_pass unix:{dir}/php-fpm.sock;
        }}
    }}
}}
"""


def php_fpm():
    for name in ("php-fpm8.2", "php-fpm"):
        found = shutil.which(name) or shutil.which(name, path="/usr/sbin")
        if found:
            return found
    return None


def api_php(workdir):
    """api.php's path: BENCH_PHP_CRUD_API, or a download of the tagged release's file; (None, why)
    when neither is there."""
    given = os.environ.get("BENCH_PHP_CRUD_API")
    if given:
        path = Path(given)
        return (path, None) if path.is_file() else (None, f"BENCH_PHP_CRUD_API={given} is not a file")
    try:
        response = requests.get(PHP_CRUD_API_URL, timeout=20)
        response.raise_for_status()
    except requests.RequestException as exc:
        return None, f"could not download {PHP_CRUD_API_URL} ({type(exc).__name__}); set BENCH_PHP_CRUD_API"
    path = workdir / "api.php"
    path.write_bytes(response.content)
    return path, None


def start_php_crud_api(workdir, url):
    """nginx + PHP-FPM serving api.php over the MariaDB at `url` (sqlalchemy's, root without a
    password); ([processes], base URL), or (None, why not)."""
    fpm, nginx = php_fpm(), shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if fpm is None or nginx is None:
        return None, "php-fpm or nginx is not installed: apt-get install php8.2-fpm php8.2-mysql nginx"
    directory = workdir / "php"
    (directory / "www").mkdir(parents=True)
    (directory / "cache").mkdir()
    source, why = api_php(directory)
    if source is None:
        return None, why
    shutil.copyfile(source, directory / "www" / "api.php")
    create_php_user(url)
    root = os.geteuid() == 0  # root's processes must name the user to run as (and php-fpm, -R)
    database = url.rsplit("/", 1)[1].split("?")[0]
    port, mysql_port = free_port(), url.split("@127.0.0.1:")[1].split("/")[0]
    (directory / "php-fpm.conf").write_text(
        FPM_CONF.format(
            dir=directory, user="user = root\ngroup = root" if root else "", children=PHP_CHILDREN,
            port=mysql_port, username=PHP_USER, password=PHP_PASSWORD, database=database,
        )
    )  # fmt: skip
    (directory / "nginx.conf").write_text(NGINX_CONF.format(dir=directory, user="user root;" if root else "",
                                                            port=port))  # fmt: skip
    command = [
        fpm,
        "--nodaemonize",
        "--fpm-config",
        str(directory / "php-fpm.conf"),
        "-d",
        "opcache.enable=1",
    ]
    fpm_process = spawn([*command, *(["--allow-to-run-as-root"] if root else [])], LOGS / "php-fpm.log")
    nginx_process = spawn(
        [nginx, "-p", str(directory), "-c", str(directory / "nginx.conf")], LOGS / "nginx.log"
    )
    base = f"http://127.0.0.1:{port}/api.php"
    try:
        wait_until_up(nginx_process, f"http://127.0.0.1:{port}/", "nginx")
        wait_until_up(fpm_process, f"{base}/records/items/1", "php-fpm")
        if requests.get(f"{base}/records/items/1", timeout=10).status_code != 200:
            raise SystemExit(f"php-crud-api does not answer /records/items/1; see {directory}")
    except BaseException:
        stop(nginx_process)
        stop(fpm_process)
        raise
    return [fpm_process, nginx_process], base


def create_php_user(url):
    import pymysql

    port = int(url.split("@127.0.0.1:")[1].split("/")[0])
    database = url.rsplit("/", 1)[1].split("?")[0]
    connection = pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True)
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE USER IF NOT EXISTS '{PHP_USER}'@'127.0.0.1' IDENTIFIED BY '{PHP_PASSWORD}'")
        cursor.execute(f"GRANT ALL ON `{database}`.* TO '{PHP_USER}'@'127.0.0.1'")
    connection.close()


# --- CPU per request, from /proc


def cpu_seconds(pids):
    """The CPU time (user + system) the processes `pids` and all their descendants, living or
    reaped, have used, in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total, seen, todo = 0, set(), list(pids)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / tick


def side_by_side(results, label, sides):
    """Each side's rate for `label` and its CPU milliseconds a request (of its PIDs and their
    descendants), the sides taking turns for ROUNDS rounds of TURN seconds each, so that a burst
    of other load on the machine falls on both rather than on one. `sides`: (name, url, pids,
    wrk options)."""
    used = {name: [0, 0.0] for name, *_ in sides}  # requests, CPU seconds
    for turn in range(1, ROUNDS + 1):
        for name, url, pids, options in sides:
            cpu, served = cpu_seconds(pids), results.served.get(name, 0)
            results.wrk(f"{name}: {label} ({turn}/{ROUNDS})", url, seconds=TURN, server=name,
                        **options)  # fmt: skip
            used[name][0] += results.served[name] - served
            used[name][1] += cpu_seconds(pids) - cpu
    for name, (requests_done, cpu) in used.items():
        rate, per_request = requests_done / (TURN * ROUNDS), 1000 * cpu / max(requests_done, 1)
        results.rates[f"{name}: {label}"], results.cpu[f"{name}: {label}"] = rate, per_request
        print(f"  {name + ': ' + label:<46} {rate:8.0f} req/s   {per_request:6.3f} ms CPU a request"
              " (server + MariaDB)", flush=True)  # fmt: skip


# --- the comparison


KEY = "MariaDB key read"
LIST = "MariaDB filtered list, 50 rows"
INSERT = "MariaDB insert of one row"


def bench_php_crud_api(workdir, results, key, url, mariadb):
    """The comparison's rows: minibase (WORKERS=2) / php-crud-api, rate and CPU a request, for the
    key read, the 50-row list and the insert; [] with a line when php-crud-api cannot run."""
    php, base = start_php_crud_api(workdir, url)
    if php is None:
        print(f"\n(php-crud-api: skipped, {base})")
        return []
    minibase = None
    try:
        print(f"\nMariaDB: minibase (WORKERS=2) and php-crud-api {PHP_CRUD_API_TAG} (nginx + PHP-FPM, "
              f"{PHP_CHILDREN} children, opcache) on the same table", flush=True)  # fmt: skip
        (workdir / "php-tables").mkdir()
        minibase, mini = start_minibase(workdir / "php-tables", url, TABLES_TOML, WORKERS=2)
        apikey = {"apikey": key}
        mini_pids = [minibase.pid, mariadb.pid]
        php_pids = [process.pid for process in php] + [mariadb.pid]
        reads = [
            (KEY, "/rest/v1/items?id=eq.4242", "/records/items/4242"),
            (LIST, "/rest/v1/items?" + LIST_QUERY,
             "/records/items?filter=location,cs,lo&filter=id,gt,100&order=name&size=50"),
        ]  # fmt: skip
        # Each worker reflects the table on its first read, and both workers of a service that just
        # started serve at full rate only after a few seconds (the first turn ran at half): warm up.
        for turn, (label, mine, theirs) in enumerate(reads):
            results.wrk("warm-up", mini + mine, apikey, seconds=6 if turn == 0 else 2, server="warm-up")
            results.wrk("warm-up", base + theirs, seconds=2, server="warm-up")
            side_by_side(results, label, [("minibase", mini + mine, mini_pids, {"headers": apikey}),
                                          ("php-crud-api", base + theirs, php_pids, {})])  # fmt: skip
        mine_script, theirs_script = workdir / "insert-minibase.lua", workdir / "insert-php.lua"
        mine_script.write_text(INSERT_SCRIPT % (ROW, f'wrk.headers["apikey"] = "{key}"'))
        theirs_script.write_text(INSERT_SCRIPT % (ROW, ""))
        side_by_side(results, INSERT, [
            ("minibase", mini + "/rest/v1/items", mini_pids, {"script": str(mine_script)}),
            ("php-crud-api", base + "/records/items", php_pids, {"script": str(theirs_script)}),
        ])  # fmt: skip
    finally:
        stop(minibase)
        for process in reversed(php):
            stop(process)
    rows = []
    for label in (KEY, LIST, INSERT):
        rate = results.rates[f"minibase: {label}"] / results.rates[f"php-crud-api: {label}"]
        cpu = results.cpu[f"minibase: {label}"] / results.cpu[f"php-crud-api: {label}"]
        tail = worst_p99(results, "minibase", label) / worst_p99(results, "php-crud-api", label)
        rows.append((f"{label}: req/s, minibase / php-crud-api", f"{rate:.2f}", ">= 1.2", rate >= 1.2))
        rows.append((f"{label}: CPU a request, minibase / php-crud-api", f"{cpu:.2f}", "<= 1", cpu <= 1))
        rows.append((f"{label}: p99 of the worst round, minibase / php-crud-api", f"{tail:.2f}", "<= 1.5",
                     tail <= 1.5))  # fmt: skip
    return rows


def worst_p99(results, name, label):
    """The highest p99 of `name`'s rounds of `label`, in milliseconds."""
    return max(results.p99[f"{name}: {label} ({turn}/{ROUNDS})"] for turn in range(1, ROUNDS + 1))
