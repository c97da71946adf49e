// Where a job comes from (net/bootstrap/launcher_detect.hpp, job_config::from_env): the launchers'
// variables in their order and under OPTCAST_*'s, Slurm's host lists, store URLs, the
// interface and address a rank advertises, and the errors for setups that cannot work.
#include <catch2/catch.hpp>

#include <asio/io_context.hpp>

#include <map>
#include <string>

#include "bootstrap/file_store.hpp"
#include "bootstrap/job_session.hpp"
#include "bootstrap/launcher_detect.hpp"
#include "bootstrap/redis_store.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;

namespace {

using vars = std::map<std::string, std::string>;

// from_env on exactly these variables, none of the process's.
job_config config_of(const vars& v) {
  return job_config::from_env([&v](const char* name) -> const char* {
    auto it = v.find(name);
    return it == v.end() ? nullptr : it->second.c_str();
  });
}

std::string error_of(const vars& v) {
  try {
    config_of(v);
  } catch (const setup_error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<std::string> hosts(std::string_view list) { return launcher::expand_hostlist(list).value_or(std::vector<std::string>{"(error)"}); }

const vars slurm_step = {{"SLURM_PROCID", "5"},           {"SLURM_NTASKS", "8"},        {"SLURM_STEP_NUM_TASKS", "8"},
                         {"SLURM_JOB_ID", "4242"},        {"SLURM_STEP_ID", "3"},       {"SLURM_STEP_NODELIST", "h[0-3,7],x[08-09]"},
                         {"SLURM_JOB_NODELIST", "h[0-9]"}, {"SLURM_LOCALID", "0"},       {"SLURM_NODEID", "5"}};

}  // namespace

TEST_CASE("Slurm's host lists expand as Slurm writes them", "[launcher]") {
  CHECK(hosts("h0") == std::vector<std::string>{"h0"});
  CHECK(hosts("h[0-3,7]") == std::vector<std::string>{"h0", "h1", "h2", "h3", "h7"});
  CHECK(hosts("node[08-11],gpu5") == std::vector<std::string>{"node08", "node09", "node10", "node11", "gpu5"});
  CHECK(hosts("r[1-2]n[1-2]") == std::vector<std::string>{"r1n1", "r1n2", "r2n1", "r2n2"});
  CHECK(hosts("a,b[3],c") == std::vector<std::string>{"a", "b3", "c"});
  for (const char* bad : {"h[0-3", "h0-3]", "h[3-1]", "h[x]", "h[[1]]", "h[1-]"}) {
    INFO(bad);
    CHECK_FALSE(launcher::expand_hostlist(bad));
  }
}

TEST_CASE("store URLs: tcp, file and redis, IPv6 in brackets, and what is wrong with a bad one", "[launcher]") {
  auto t = launcher::parse_store_url("h0:29500");
  REQUIRE(t);
  CHECK((t->scheme == "tcp" && t->host == "h0" && t->port == 29500));
  auto v6 = launcher::parse_store_url("tcp://[fd00::1]:7");
  REQUIRE(v6);
  CHECK((v6->host == "fd00::1" && v6->port == 7));
  auto f = launcher::parse_store_url("file:///shared/job");
  REQUIRE(f);
  CHECK((f->scheme == "file" && f->path == "/shared/job"));
  auto r = launcher::parse_store_url("redis://:pw@cache.example:6380/svc/a");
  REQUIRE(r);
  CHECK((r->scheme == "redis" && r->host == "cache.example" && r->port == 6380 && r->path == "svc/a" && r->password == "pw"));
  auto rd = launcher::parse_store_url("redis://10.0.0.2");
  REQUIRE(rd);
  CHECK((rd->port == 6379 && rd->path.empty()));
  auto pm = launcher::parse_store_url("pmix:");
  REQUIRE(pm);
  CHECK(pm->scheme == "pmix");
  const std::pair<const char*, const char*> bad[] = {{"h0", "no port"},
                                                     {"pmix://h0", "takes nothing"},
                                                     {"h0:99999", "not a port"},
                                                     {"fd00::1:29500", "in brackets"},
                                                     {"file://relative", "absolute"},
                                                     {"http://h:1", "none of tcp://"},
                                                     {"[fd00::1:5", "no ']'"}};
  for (const auto& [url, says] : bad) {
    std::string why;
    INFO(url);
    CHECK_FALSE(launcher::parse_store_url(url, &why));
    CHECK_THAT(why, Catch::Contains(says));
  }
}

TEST_CASE("every store scheme in the table parses its own form, and the messages list them all", "[launcher]") {
  std::string why;
  for (const auto& row : launcher::store_schemes()) {
    INFO(row.name);
    // The forms' placeholders made concrete: an absolute path, a host and a port.
    std::string url(row.form);
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"[:password@]", ":pw@"}, {"host[:port]", "h0:7"}, {"host:port", "h0:7"}, {"[/prefix]", "/p"}})
      if (const auto at = url.find(from); at != std::string::npos) url.replace(at, from.size(), to);
    const auto u = launcher::parse_store_url(url, &why);
    REQUIRE(u);
    CHECK(u->scheme == row.name);
    CHECK(launcher::find_store_scheme(row.name) == &row);
    CHECK_THAT(launcher::store_forms(), Catch::Contains(std::string(row.form)));
  }
  CHECK_FALSE(launcher::parse_store_url("gopher://h0:7", &why));
  for (const auto& row : launcher::store_schemes()) CHECK_THAT(why, Catch::Contains(std::string(row.name)));
  // pmix: names the launcher's server, which a rank given its place by OPTCAST_* has not.
  CHECK_THAT(error_of({{"OPTCAST_RANK", "0"}, {"OPTCAST_SIZE", "2"}, {"OPTCAST_STORE", "pmix:"}}), Catch::Contains("PMIx launcher"));
}

TEST_CASE("srun's variables: rank, size, job and step as the job id, the store on the step's first node", "[launcher]") {
  auto c = config_of(slurm_step);
  CHECK(c.launcher == "Slurm");
  CHECK(c.rank == 5);
  CHECK(c.size == 8);
  CHECK(c.job_id == ((std::uint64_t{4242} << 32) | 3));
  CHECK(c.store.host == "h0");
  CHECK(c.store.port >= 20000);
  CHECK(c.store.port < 30000);
  CHECK_FALSE(c.kv);
  // Another step of the job: another id, and (most likely) another port.
  auto other = slurm_step;
  other["SLURM_STEP_ID"] = "4";
  CHECK(config_of(other).job_id != c.job_id);
  CHECK(config_of(other).store.port != c.store.port);
  // Ports Slurm reserved for the step, and OPTCAST_STORE_PORT, choose the port.
  other["SLURM_STEP_RESV_PORTS"] = "12000-12003";
  CHECK(config_of(other).store.port == 12000);
  other["OPTCAST_STORE_PORT"] = "31000";
  CHECK(config_of(other).store.port == 31000);
  CHECK(config_of(other).store.host == "h0");
  // A batch script's own shell (no step) is not a rank of anything.
  auto batch = slurm_step;
  batch.erase("SLURM_STEP_ID");
  CHECK_THAT(error_of(batch), Catch::Contains("no launcher found"));
  batch["SLURM_STEP_ID"] = "x";
  CHECK_THAT(error_of(batch), Catch::Contains("not a job and a step number"));
}

TEST_CASE("torchrun's variables: RANK, WORLD_SIZE, the store at MASTER_ADDR:MASTER_PORT", "[launcher]") {
  vars v = {{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "fd00::9"}, {"MASTER_PORT", "29400"}};
  auto c = config_of(v);
  CHECK(c.launcher == "torchrun");
  CHECK((c.rank == 2 && c.size == 4));
  CHECK((c.store.host == "fd00::9" && c.store.port == 29400));
  CHECK(c.job_id == 0);  // rank 0 draws one
  v["TORCHELASTIC_RUN_ID"] = "none";
  CHECK(config_of(v).job_id == 0);
  v["TORCHELASTIC_RUN_ID"] = "exp-17";
  const auto id = config_of(v).job_id;
  CHECK(id != 0);
  v["TORCHELASTIC_RUN_ID"] = "exp-18";
  CHECK(config_of(v).job_id != id);
  v.erase("MASTER_PORT");
  CHECK_THAT(error_of(v), Catch::Contains("MASTER_ADDR and MASTER_PORT"));
  v["WORLD_SIZE"] = "2";
  v["RANK"] = "2";
  v["MASTER_PORT"] = "1";
  CHECK_THAT(error_of(v), Catch::Contains("torchrun's RANK='2' is not a number in [0, 1]"));
}

TEST_CASE("OPTCAST_* over every launcher's word, field by field; the order of the launchers", "[launcher]") {
  auto v = slurm_step;
  v["RANK"] = "1";  // torchrun's come before Slurm's
  v["WORLD_SIZE"] = "2";
  v["MASTER_ADDR"] = "m";
  v["MASTER_PORT"] = "5";
  CHECK(config_of(v).launcher == "torchrun");
  v["OPTCAST_RANK"] = "0";
  auto c = config_of(v);
  CHECK((c.rank == 0 && c.size == 2 && c.store.host == "m"));
  v["OPTCAST_SIZE"] = "3";
  v["OPTCAST_STORE"] = "10.1.2.3:77";
  v["OPTCAST_JOB_ID"] = "99";
  c = config_of(v);
  CHECK(c.launcher == "OPTCAST_RANK/OPTCAST_SIZE");
  CHECK((c.rank == 0 && c.size == 3 && c.store.host == "10.1.2.3" && c.store.port == 77 && c.job_id == 99));
  // PMIx comes first, and is named when it is what started the program.
  v["PMIX_RANK"] = "0";
  v["PMIX_NAMESPACE"] = "prterun-h0-1@1";
  CHECK(config_of(v).rank == 0);  // OPTCAST_* still decide
}

TEST_CASE("no launcher: one error that lists everything looked for", "[launcher]") {
  const auto e = error_of({{"HOME", "/root"}});
  for (const char* name : {"OPTCAST_RANK", "OPTCAST_SIZE", "PMIX_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
                           "SLURM_STEP_ID", "--np"}) {
    INFO(name);
    CHECK_THAT(e, Catch::Contains(name));
  }
  CHECK_THAT(error_of({{"OPTCAST_RANK", "0"}}), Catch::Contains("set both"));
  CHECK_THAT(error_of({{"OPTCAST_RANK", "0"}, {"OPTCAST_SIZE", "2"}}), Catch::Contains("OPTCAST_STORE is not set"));
  CHECK_THAT(error_of({{"OPTCAST_RANK", "0"}, {"OPTCAST_SIZE", "2"}, {"OPTCAST_STORE", "h:1"}, {"OPTCAST_FAMILY", "5"}}),
             Catch::Contains("neither 4 nor 6"));
}

TEST_CASE("OPTCAST_POLL and OPTCAST_POLL_US: adaptive by default, each mode by name, bad values named", "[launcher]") {
  vars v = {{"OPTCAST_RANK", "0"}, {"OPTCAST_SIZE", "2"}, {"OPTCAST_STORE", "h:1"}};
  auto c = config_of(v);
  CHECK(c.poll == job_config::poll_mode::adaptive);
  CHECK(c.poll_limit == std::chrono::microseconds(200));
  v["OPTCAST_POLL"] = "spin";
  CHECK(config_of(v).poll == job_config::poll_mode::spin);
  v["OPTCAST_POLL"] = "block";
  v["OPTCAST_POLL_US"] = "50";
  c = config_of(v);
  CHECK((c.poll == job_config::poll_mode::block && c.poll_limit == std::chrono::microseconds(50)));
  v["OPTCAST_POLL_US"] = "-1";
  CHECK_THAT(error_of(v), Catch::Contains("OPTCAST_POLL_US='-1' is not a number in [0, 1000000]"));
  v.erase("OPTCAST_POLL_US");
  v["OPTCAST_POLL"] = "busy";
  CHECK_THAT(error_of(v), Catch::Contains("OPTCAST_POLL='busy' is none of adaptive, spin, block"));
}

TEST_CASE("file and Redis stores from OPTCAST_STORE, their keys under the job id; without one, an error", "[launcher]") {
  testing::temp_dir dir;
  vars v = {{"OPTCAST_RANK", "1"}, {"OPTCAST_SIZE", "2"}, {"OPTCAST_STORE", "file://" + dir.path() + "/s"}};
  CHECK_THAT(error_of(v), Catch::Contains("needs a job id"));
  v["OPTCAST_JOB_ID"] = "77";
  auto c = config_of(v);
  auto* f = dynamic_cast<file_kv_store*>(c.kv.get());
  REQUIRE(f);
  CHECK_THAT(f->path_of("optcast/x"), Catch::Contains("job-77."));
  // Under Slurm the step gives the id.
  auto s = slurm_step;
  s["OPTCAST_STORE"] = v["OPTCAST_STORE"];
  c = config_of(s);
  REQUIRE(dynamic_cast<file_kv_store*>(c.kv.get()));
  CHECK_THAT(dynamic_cast<file_kv_store*>(c.kv.get())->path_of("k"), Catch::Contains("job-" + std::to_string((std::uint64_t{4242} << 32) | 3)));
  if (has_redis_store()) {
    v["OPTCAST_STORE"] = "redis://127.0.0.1:1/svc";
    v["OPTCAST_REDIS_PASSWORD"] = "pw";
    c = config_of(v);
    auto* r = dynamic_cast<redis_kv_store*>(c.kv.get());
    REQUIRE(r);
    CHECK(r->settings().prefix == "svc/job-77");
    CHECK(r->settings().password == "pw");
    CHECK(r->settings().port == 1);
  } else {
    v["OPTCAST_STORE"] = "redis://127.0.0.1:1/svc";
    CHECK_THAT(error_of(v), Catch::Contains("libhiredis-dev"));
  }
}

TEST_CASE("interfaces: names, prefixes, exclusions, families; an interface that is not there is named in the error", "[launcher]") {
  std::string why;
  auto lo = launcher::choose_address("lo", 4, &why);
  REQUIRE(lo);
  CHECK(*lo == "127.0.0.1");
  CHECK(*launcher::choose_address("=lo", 4) == "127.0.0.1");
  CHECK_FALSE(launcher::choose_address("=l", 4, &why));
  CHECK_THAT(why, Catch::Contains("lo"));  // what the host has
  CHECK_FALSE(launcher::choose_address("nosuch0", 0, &why));
  CHECK_THAT(why, Catch::Contains("nosuch0"));
  // All but loopback: an address of another interface, or an error if there is none.
  auto other = launcher::choose_address("^lo", 0, &why);
  bool has_other = false;
  for (const auto& ia : launcher::interfaces()) has_other |= ia.up && !ia.loopback;
  CHECK(bool(other) == has_other);
  if (other) CHECK_FALSE(launcher::is_loopback(*other));
  // Empty: not loopback when there is anything else.
  auto any = launcher::choose_address("", 0);
  REQUIRE(any);
  CHECK(launcher::is_loopback(*any) == !has_other);
  CHECK(launcher::is_loopback("127.0.1.1"));
  CHECK(launcher::is_loopback("::1"));
  CHECK_FALSE(launcher::is_loopback("10.0.0.1"));
  CHECK(*launcher::resolve("localhost", 4) == "127.0.0.1");
  CHECK(*launcher::resolve("10.9.8.7", 6) == "10.9.8.7");  // a literal stays
  CHECK_FALSE(launcher::resolve("no-such-host.invalid", 0, &why));
  CHECK(launcher::host_identity() == launcher::host_identity());
}

TEST_CASE("a rank told an interface that does not exist fails at once, naming the interfaces there are", "[launcher][kv]") {
  asio::io_context io;
  job_config c;
  c.rank = 0;
  c.size = 2;
  c.kv = std::make_shared<memory_kv_store>();
  c.ifname = "nosuch0";
  try {
    job_session j(io.get_executor(), c);
    FAIL("no error");
  } catch (const setup_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("nosuch0") && Catch::Contains("lo"));
  }
  c.ifname.clear();
  c.host = "no-such-host.invalid";
  CHECK_THROWS_WITH(job_session(io.get_executor(), c), Catch::Contains("OPTCAST_HOST") && Catch::Contains("no-such-host.invalid"));
}

TEST_CASE("OPTCAST_REJOIN: a replacement over optcast's TCP store, never rank 0 hosting it", "[launcher]") {
  const vars base = {{"OPTCAST_RANK", "2"}, {"OPTCAST_SIZE", "4"}, {"OPTCAST_STORE", "127.0.0.1:29500"}, {"OPTCAST_REJOIN", "1"}};
  CHECK(config_of(base).rejoin);
  auto plain = base;
  plain.erase("OPTCAST_REJOIN");
  CHECK_FALSE(config_of(plain).rejoin);
  auto zero = base;
  zero["OPTCAST_RANK"] = "0";
  CHECK_THAT(error_of(zero), Catch::Contains("rank 0 hosts the store"));
  zero["OPTCAST_STORE_EXTERNAL"] = "1";
  CHECK(config_of(zero).rejoin);
  auto file = base;
  file["OPTCAST_STORE"] = "file:///tmp/x";
  file["OPTCAST_JOB_ID"] = "7";
  CHECK_THAT(error_of(file), Catch::Contains("optcast's TCP store"));
  auto bad = base;
  bad["OPTCAST_REJOIN"] = "yes";
  CHECK_THAT(error_of(bad), Catch::Contains("OPTCAST_REJOIN"));
}
