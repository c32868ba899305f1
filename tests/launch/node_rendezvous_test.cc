// The launchers' meeting across machines (node_rendezvous.h), with each launcher a
// thread on loopback: unequal worker counts give ranks in node-rank order whatever the
// order of arrival; launchers that disagree stop with one line naming the disagreement;
// a stranger's connection is dropped without ending the wait; a missing node ends it at
// the timeout, named; and the port is free for rank 0's store as soon as all return.
#include "harp/launch/node_rendezvous.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <map>
#include <thread>

#include "harp/launch/launcher.h"
#include "harp/launch/slurm.h"
#include "testutil/status.h"

namespace harp::launch {
namespace {

NodeMeeting meeting(int port, int nnodes, int node, int nproc, double timeout_s = 20) {
  NodeMeeting m;
  m.master_addr = "127.0.0.1";
  m.master_port = port;
  m.nnodes = nnodes;
  m.node_rank = node;
  m.nproc = nproc;
  m.timeout_s = timeout_s;
  return m;
}

// Every node's answer, node `first` starting first and the others after `delay_ms`.
std::vector<StatusOr<NodeRanks>> meet_all(const std::vector<NodeMeeting>& ms, int first, int delay_ms) {
  std::vector<std::future<StatusOr<NodeRanks>>> futures(ms.size());
  futures[first] = std::async(std::launch::async, [&ms, first] { return meet_nodes(ms[first]); });
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  for (size_t i = 0; i < ms.size(); ++i)
    if (static_cast<int>(i) != first)
      futures[i] = std::async(std::launch::async, [&ms, i] { return meet_nodes(ms[i]); });
  std::vector<StatusOr<NodeRanks>> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

bool port_is_free(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as c10d's store binds
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && listen(fd, 1) == 0;
  close(fd);
  return ok;
}

TEST(NodeRendezvous, UnequalNodesGetRanksInNodeRankOrder) {
  // 2 + 1 and 1 + 3 (the 8 + 4 of a V100 node beside an A100 node, scaled down), and
  // 3 + 1 + 2 with node 2 first to arrive: node 0 must wait for it.
  struct Case {
    std::vector<int> nprocs;
    int first;
  };
  for (const Case& c : {Case{{2, 1}, 0}, Case{{1, 3}, 1}, Case{{3, 1, 2}, 2}}) {
    const int port = free_port().value();
    std::vector<NodeMeeting> ms;
    for (size_t n = 0; n < c.nprocs.size(); ++n)
      ms.push_back(meeting(port, static_cast<int>(c.nprocs.size()), static_cast<int>(n), c.nprocs[n]));
    const auto got = meet_all(ms, c.first, 300);
    int first = 0, world = 0;
    for (int n : c.nprocs) world += n;
    for (size_t n = 0; n < got.size(); ++n) {
      HARP_ASSERT_OK(got[n].status());
      EXPECT_EQ(got[n]->first_rank, first) << "node " << n;
      EXPECT_EQ(got[n]->world_size, world);
      EXPECT_EQ(got[n]->nprocs, c.nprocs);
      first += c.nprocs[n];
    }
    EXPECT_TRUE(port_is_free(port)) << "rank 0's store could not take the port";
  }
}

TEST(NodeRendezvous, DisagreementsStopEveryLauncherNamingIt) {
  {  // two launchers say node rank 1
    const int port = free_port().value();
    const auto got = meet_all({meeting(port, 3, 0, 1), meeting(port, 3, 1, 1), meeting(port, 3, 1, 2)}, 0, 200);
    for (const auto& g : got) {
      ASSERT_FALSE(g.ok());
      EXPECT_NE(g.status().message().find("two launchers say --node-rank 1"), std::string::npos)
          << g.status().message();
    }
  }
  {  // the number of machines
    const int port = free_port().value();
    const auto got = meet_all({meeting(port, 2, 0, 1), meeting(port, 3, 1, 1)}, 0, 200);
    for (const auto& g : got) {
      ASSERT_FALSE(g.ok());
      EXPECT_NE(g.status().message().find("says --nnodes 3, node 0 says 2"), std::string::npos)
          << g.status().message();
    }
  }
  {  // the secret
    const int port = free_port().value();
    NodeMeeting a = meeting(port, 2, 0, 1, 3), b = meeting(port, 2, 1, 1, 3);
    a.secret = "0123456789abcdef-node0";
    b.secret = "0123456789abcdef-other";
    std::vector<std::string> notes;
    a.progress = [&notes](const std::string& line) { notes.push_back(line); };
    const auto got = meet_all({a, b}, 0, 200);
    ASSERT_FALSE(got[1].ok());
    EXPECT_NE(got[1].status().message().find("HARP_RENDEZVOUS_SECRET differs"), std::string::npos);
    // Node 0 keeps waiting for a launcher with its secret, and names who it misses.
    ASSERT_FALSE(got[0].ok());
    EXPECT_NE(got[0].status().message().find("for node(s) 1 of 2"), std::string::npos) << got[0].status().message();
    ASSERT_FALSE(notes.empty());
    EXPECT_NE(notes[0].find("dropped a connection from 127.0.0.1"), std::string::npos) << notes[0];
  }
}

TEST(NodeRendezvous, AStrangerIsDroppedAndTheMeetingGoesOn) {
  const int port = free_port().value();
  auto node0 = std::async(std::launch::async, [port] { return meet_nodes(meeting(port, 2, 0, 2)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string junk = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_EQ(send(fd, junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));
  char reply[256] = {};
  EXPECT_GT(recv(fd, reply, sizeof reply - 1, 0), 0);
  EXPECT_EQ(std::string(reply).rfind("error not a harp launch", 0), 0u) << reply;
  close(fd);
  const auto node1 = meet_nodes(meeting(port, 2, 1, 1));
  HARP_ASSERT_OK(node1.status());
  EXPECT_EQ(node1->first_rank, 2);
  HARP_ASSERT_OK(node0.get().status());
}

TEST(NodeRendezvous, AMissingNodeEndsTheWaitAtTheTimeoutNamed) {
  const int port = free_port().value();
  const auto start = std::chrono::steady_clock::now();
  const auto node0 = meet_nodes(meeting(port, 3, 0, 1, 1.5));
  ASSERT_FALSE(node0.ok());
  EXPECT_NE(node0.status().message().find("waited 1.5 s at 127.0.0.1:" + std::to_string(port) + " for node(s) 1, 2 of 3"),
            std::string::npos)
      << node0.status().message();
  const auto node1 = meet_nodes(meeting(port, 2, 1, 1, 1.0));  // nobody listens now
  ASSERT_FALSE(node1.ok());
  EXPECT_NE(node1.status().message().find("found no launcher of node 0"), std::string::npos)
      << node1.status().message();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10);
}

TEST(NodeRendezvous, AcrossMachinesASecretIsRequired) {
  NodeMeeting m = meeting(29500, 2, 1, 1, 1);
  m.master_addr = "10.1.2.3";
  const auto got = meet_nodes(m);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("set HARP_RENDEZVOUS_SECRET"), std::string::npos);
}

TEST(NodeRendezvous, FirstRanksFollowNodeRankOrder) {
  EXPECT_EQ(first_ranks({8, 4}), (std::vector<int>{0, 8, 12}));
  EXPECT_EQ(first_ranks({1, 3}), (std::vector<int>{0, 1, 4}));
}

// SLURM's host lists and variables for `harp launch --slurm`.
TEST(Slurm, FirstHostAndTheNodesVariables) {
  EXPECT_EQ(first_slurm_host("gpu[07-09,12],cpu1"), "gpu07");
  EXPECT_EQ(first_slurm_host("rack[1-2]-n[01-04]"), "rack1-n01");
  EXPECT_EQ(first_slurm_host("a100-3,v100-1"), "a100-3");
  EXPECT_EQ(first_slurm_host("gpu[07"), "");
  EXPECT_EQ(first_slurm_host("gpu[x-y]"), "");
  std::map<std::string, std::string> env = {{"SLURM_NNODES", "2"},
                                            {"SLURM_NODEID", "1"},
                                            {"SLURM_JOB_NODELIST", "v100-node,a100-node[3-4]"},
                                            {"SLURM_GPUS_ON_NODE", "4"}};
  auto lookup = [&env](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto node = slurm_node(lookup);
  HARP_ASSERT_OK(node.status());
  EXPECT_EQ(node->nnodes, 2);
  EXPECT_EQ(node->node_rank, 1);
  EXPECT_EQ(node->master_addr, "v100-node");
  EXPECT_EQ(node->gpus_on_node, 4);
  env["SLURM_NODEID"] = "2";
  EXPECT_NE(slurm_node(lookup).status().message().find("SLURM_NODEID = 2 with 2 nodes"), std::string::npos);
  env.erase("SLURM_NODEID");
  EXPECT_NE(slurm_node(lookup).status().message().find("SLURM_NODEID is not set; fix: run one launcher per node"),
            std::string::npos);
}

}  // namespace
}  // namespace harp::launch
