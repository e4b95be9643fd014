// A user's program linking the installed halfgrad::distributed (and through it MPI): reads the
// launcher's environment without starting MPI.
#include <fmt/format.h>

#include <halfgrad/distributed/process_group.h>

int main() {
  const hg::distributed::LaunchEnvironment env = hg::distributed::read_launch_environment();
  if (!hg::distributed::is_mpi_available() || env.world_size < 1) return 1;
  fmt::print("consumer distributed ok: {} of {} ({})\n", env.rank, env.world_size, env.launcher);
  return 0;
}
