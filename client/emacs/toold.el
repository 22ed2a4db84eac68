;;; toold.el --- Watch toold sessions and answer their approvals -*- lexical-binding: t; -*-

;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1"))
;; Keywords: tools, processes

;;; Commentary:

;; Emacs as a frontend of the shared toold daemon, which executes AI agents' tool calls: watch
;; a session's calls live (`toold-watch', in `*toold: SESSION*'), answer its approvals with
;; their previews (a write's or an edit's diff in `diff-mode', a command's directory, simple
;; commands and sandbox) through `completing-read', explain how a call would be decided
;; (`toold-explain'), and see pending approvals in the mode line.  It speaks the daemon's
;; JSON-RPC over its Unix socket with the built-in jsonrpc.el (LSP framing, which the daemon
;; picks from the first byte), and reconnects and re-attaches when the daemon restarts.

;;; Code:

(require 'cl-lib)
(require 'jsonrpc)
(require 'seq)
(require 'subr-x)

(defgroup toold nil
  "Watch toold sessions and answer their approvals."
  :group 'tools)

(defcustom toold-socket nil
  "The daemon's socket; nil: as `toold status' finds it.
That is `$TOOLD_SOCKET', the config's `socket',
`$XDG_RUNTIME_DIR/toold/toold.sock', else `/tmp/toold-UID/toold.sock'."
  :type '(choice (const :tag "As toold status finds it" nil) file))

(defconst toold--choices
  '(("Allow once" . "allow_once")
    ("Allow for this session" . "allow_session")
    ("Always allow" . "allow_always")
    ("Deny" . "deny")
    ("Abort" . "abort"))
  "The decisions as people read them, in the order they are offered.")

(defvar toold--connection nil "The connection to the daemon, once made.")
(defvar toold--initialized nil "The daemon's answer to `initialize'.")
(defvar toold--session nil "The session watched.")
(defvar toold--last-seq nil "The last event seen of the watched session.")
(defvar toold--reconnect-timer nil)
(defvar toold--queue nil "Approvals waiting: (APPROVAL-ID PARAMS REQUEST-ID), oldest first.")
(defvar toold--current nil "The approval being asked, as in `toold--queue'.")
(defvar toold--deferred (make-hash-table :test #'equal)
  "Approval ids whose request id the connection holds back until they are answered.")
(defvar toold--deferred-count 0)

(defclass toold-connection (jsonrpc-process-connection) ()
  "A connection whose approval requests are answered later, once a person has chosen.")

(cl-defmethod jsonrpc-connection-send ((_connection toold-connection) &rest args
                                       &key id result &allow-other-keys)
  "Send ARGS, unless they reply to an approval (request ID).
An approval is answered by `toold--answer' once a person chose; the
dispatcher's immediate RESULT for it is a token, recorded, not sent."
  (if (and id (consp result) (eq (car result) 'toold-deferred))
      (let ((entry (assoc (cdr result) toold--queue)))
        (when entry (setf (nth 2 entry) id)))
    (cl-call-next-method)))

(defun toold--socket ()
  "The socket to reach the daemon on."
  (or toold-socket
      (let ((env (getenv "TOOLD_SOCKET"))) (and env (not (string-empty-p env)) env))
      (and (executable-find "toold")
           (ignore-errors
             (let ((status (json-parse-string
                            (shell-command-to-string "toold status --json")
                            :object-type 'plist)))
               (plist-get status :socket))))
      (let ((runtime (getenv "XDG_RUNTIME_DIR")))
        (and runtime (not (string-empty-p runtime))
             (expand-file-name "toold/toold.sock" runtime)))
      (format "/tmp/toold-%d/toold.sock" (user-uid))))

(defun toold--connect ()
  "The connection to the daemon, made and initialized when there is none."
  (or (and toold--connection (jsonrpc-running-p toold--connection) toold--connection)
      (let* ((socket (toold--socket))
             (process (condition-case err
                          (make-network-process :name "toold" :family 'local
                                                :service socket :coding 'binary
                                                :noquery t)
                        (error (user-error "toold: no daemon answers on %s (%s); start it with `toold serve'"
                                           socket (error-message-string err)))))
             (connection (make-instance 'toold-connection
                                        :name "toold" :process process
                                        :events-buffer-scrollback-size 0
                                        :request-dispatcher #'toold--request
                                        :notification-dispatcher #'toold--notification
                                        :on-shutdown #'toold--closed)))
        (setq toold--initialized
              (jsonrpc-request connection :initialize
                               (list :protocol_version 1
                                     :client_info (list :name "toold.el" :version "0.1.0")
                                     :capabilities (list :approvals t))))
        (setq toold--connection connection)
        (toold--mode-line-install)
        connection)))

(defun toold--closed (_connection)
  "The connection ended: approvals it carried are gone; reach the daemon again."
  (setq toold--connection nil toold--queue nil toold--current nil)
  (clrhash toold--deferred)
  (toold--mode-line-update)
  (unless toold--reconnect-timer
    (setq toold--reconnect-timer (run-at-time 0.5 0.5 #'toold--reconnect))))

(defun toold--reconnect ()
  "Try the daemon again; once it answers, attach to the watched session again."
  (when (ignore-errors (toold--connect))
    (cancel-timer toold--reconnect-timer)
    (setq toold--reconnect-timer nil)
    (when toold--session
      (ignore-errors
        (toold--attach toold--session toold--last-seq)
        (toold--append toold--session "— reconnected to the daemon —")))))

(defun toold--attach (session-id &optional after-seq)
  "Attach to SESSION-ID as observer and approver, replaying after AFTER-SEQ."
  (jsonrpc-request (toold--connect) 'session/attach
                   (append (list :session_id session-id)
                           (and after-seq (list :after_seq after-seq)))))

;;; The session's buffer

(define-derived-mode toold-session-mode special-mode "toold"
  "The events of a toold session, as they come.")

(defun toold--buffer (session-id)
  "The buffer of SESSION-ID's events."
  (let ((buffer (get-buffer-create (format "*toold: %s*" session-id))))
    (with-current-buffer buffer
      (unless (derived-mode-p 'toold-session-mode) (toold-session-mode)))
    buffer))

(defun toold--append (session-id text)
  "Add TEXT as a line at the end of SESSION-ID's buffer."
  (with-current-buffer (toold--buffer session-id)
    (let ((inhibit-read-only t))
      (save-excursion
        (goto-char (point-max))
        (insert text "\n")))))

(defun toold--json (value)
  "VALUE as JSON text, nil as {}: jsonrpc.el reads an empty object as nil."
  (if value (json-serialize value :null-object nil :false-object :json-false) "{}"))

(defun toold--one-line (value)
  "VALUE (a string or JSON) on one line, cut at 200 characters."
  (let* ((text (if (stringp value) value (toold--json value)))
         (text (replace-regexp-in-string "[[:cntrl:]]" " " text)))
    (if (> (length text) 200) (concat (substring text 0 200) "…") text)))

(defun toold--event (method params)
  "Show the event METHOD with PARAMS in its session's buffer."
  (let* ((session (plist-get params :session_id))
         (call (plist-get params :call))
         (result (plist-get params :result))
         (text
          (pcase method
            ('tool/call_start
             (format "▶ %s %s %s" (plist-get call :id) (plist-get call :name)
                     (toold--one-line (toold--json (plist-get call :arguments)))))
            ('tool/output (string-trim-right (or (plist-get params :data) "") "\n"))
            ('tool/result
             (if (eq (plist-get result :ok) t)
                 (format "✓ %s (%s ms)" (plist-get params :call_id) (plist-get params :elapsed_ms))
               (format "✗ %s %s: %s" (plist-get params :call_id)
                       (or (plist-get result :error_type) "failed")
                       (toold--one-line (or (plist-get result :error) "")))))
            ('approval/resolved
             (format "approval of %s: %s (by %s)" (plist-get params :call_id)
                     (or (plist-get params :decision) "none") (plist-get params :by)))
            ('tool/arguments_replaced
             (format "↻ %s runs with new arguments" (plist-get call :id))))))
    (when text (toold--append session text))))

(defun toold--notification (_connection method params)
  "The daemon's notification METHOD with PARAMS."
  (when (eq method 'approval/resolved)
    (toold--settled (plist-get params :approval_id)))
  (when (and toold--session (equal (plist-get params :session_id) toold--session))
    (when (plist-get params :seq) (setq toold--last-seq (plist-get params :seq)))
    (toold--event method params)))

;;; Approvals

(defun toold--request (_connection method params)
  "The daemon's request METHOD with PARAMS: an approval, asked once its turn comes."
  (unless (eq method 'approval/request)
    (jsonrpc-error :code -32601 :message (format "toold.el does not answer %s" method)))
  (let ((approval-id (plist-get params :approval_id)))
    (setq toold--queue (append toold--queue (list (list approval-id params nil))))
    (toold--mode-line-update)
    (run-at-time 0 nil #'toold--ask-next)
    (cons 'toold-deferred approval-id)))

(defun toold-pending ()
  "How many approvals wait for an answer here."
  (+ (length toold--queue) (if toold--current 1 0)))

(defun toold--preview (params)
  "Show the preview of the approval PARAMS in `*toold preview*'."
  (let* ((preview (plist-get params :preview))
         (call (plist-get params :call))
         (buffer (get-buffer-create "*toold preview*")))
    (with-current-buffer buffer
      (let ((inhibit-read-only t))
        (erase-buffer)
        (if (equal (plist-get preview :kind) "diff")
            (progn
              (insert (let ((diff (plist-get preview :diff)))
                        (if (string-empty-p diff)
                            (format "(no change to %s)\n" (plist-get preview :path))
                          diff)))
              (diff-mode))
          (fundamental-mode)
          (insert (format "toold asks: %s\nwhy: %s\n" (plist-get call :name)
                          (plist-get params :reason)))
          (pcase (plist-get preview :kind)
            ("command"
             (let ((sandbox (plist-get preview :sandbox)))
               (insert (format "cwd: %s\ncommands:\n" (plist-get preview :cwd)))
               (seq-doseq (command (plist-get preview :commands))
                 (insert "  " command "\n"))
               (insert (format "sandbox: %s, %s\n" (plist-get sandbox :mode)
                               (if (eq (plist-get sandbox :network) t) "network open" "no network")))))
            ("unavailable"
             (insert (format "change: cannot be shown (%s)\n" (plist-get preview :reason))))
            (_ (insert (format "arguments: %s\n" (toold--one-line (plist-get call :arguments)))))))
        (let ((grant (seq-first (plist-get params :suggestions))))
          (when grant (insert (format "\nfor this session grants: %s\n" grant)))))
      (setq buffer-read-only t))
    (display-buffer buffer)
    buffer))

(defun toold--ask-next ()
  "Ask the oldest waiting approval, unless one is being asked."
  (when (and (not toold--current) toold--queue)
    (let* ((entry (pop toold--queue))
           (params (nth 1 entry))
           (offered (cl-remove-if (lambda (choice)
                                    (and (equal (cdr choice) "allow_always")
                                         (not (plist-get params :always))))
                                  toold--choices))
           (call (plist-get params :call))
           answer)
      (setq toold--current entry)
      (toold--preview params)
      (setq answer
            (condition-case nil
                (completing-read (format "toold: %s asks approval (%s): "
                                         (plist-get call :name) (plist-get params :reason))
                                 (mapcar #'car offered) nil t)
              (quit nil)))
      (toold--answer entry (cdr (assoc answer offered))))))

(defun toold--answer (entry decision)
  "Answer the approval ENTRY with DECISION (deny when nil).
Unless it was settled elsewhere meanwhile."
  (when (eq toold--current entry)
    (setq toold--current nil)
    (let ((request-id (nth 2 entry)))
      (when (and request-id toold--connection)
        (jsonrpc--reply toold--connection request-id
                        :result (list :decision (or decision "deny")))))
    (toold--mode-line-update)
    (run-at-time 0 nil #'toold--ask-next)))

(defun toold--settled (approval-id)
  "APPROVAL-ID no longer waits here: it leaves the queue, its prompt closes."
  (setq toold--queue (cl-remove approval-id toold--queue :key #'car :test #'equal))
  (when (and toold--current (equal (car toold--current) approval-id))
    (setq toold--current nil)
    (run-at-time 0 nil (lambda () (when (active-minibuffer-window) (abort-recursive-edit)))))
  (toold--mode-line-update))

;;; The mode line

(defun toold-mode-line ()
  "` toold: N pending' while approvals wait, else nothing."
  (let ((pending (toold-pending)))
    (if (> pending 0) (format " toold: %d pending" pending) "")))

(defvar toold--mode-line-entry '(:eval (toold-mode-line)))

(defun toold--mode-line-install ()
  "Show pending approvals in every mode line."
  (unless (member toold--mode-line-entry global-mode-string)
    (setq global-mode-string (append global-mode-string (list toold--mode-line-entry)))))

(defun toold--mode-line-update ()
  (force-mode-line-update t))

;;; Commands

(defun toold--sessions ()
  "The daemon's live sessions, newest first."
  (let ((sessions (append (plist-get (jsonrpc-request (toold--connect) 'session/list nil)
                                     :sessions)
                          nil)))
    ;; Creation times are to the second; the daemon numbers its sessions as it creates them.
    (sort sessions
          (lambda (a b)
            (let ((at-a (or (plist-get a :created_at) ""))
                  (at-b (or (plist-get b :created_at) "")))
              (if (string= at-a at-b)
                  (> (toold--session-number a) (toold--session-number b))
                (string> at-a at-b)))))))

(defun toold--session-number (session)
  "The number the daemon gave SESSION (`s_N_…'), 0 when it has none."
  (let ((id (or (plist-get session :session_id) "")))
    (if (string-match "\\`s_\\([0-9]+\\)_" id)
        (string-to-number (match-string 1 id))
      0)))

;;;###autoload
(defun toold-watch (&optional session-id)
  "Watch SESSION-ID (the newest session when nil) in `*toold: SESSION*'.
Attached as observer and approver: its approvals are asked here."
  (interactive)
  (let* ((session-id (or (and session-id (not (string-empty-p session-id)) session-id)
                         (plist-get (car (toold--sessions)) :session_id)
                         (user-error "toold: no session yet; start an agent through toold first")))
         (snapshot (toold--attach session-id)))
    (when (and toold--session (not (equal toold--session session-id)))
      (ignore-errors (jsonrpc-notify (toold--connect) 'session/detach
                                     (list :session_id toold--session))))
    (setq toold--session session-id
          toold--last-seq (plist-get snapshot :last_seq))
    (toold--append session-id (format "watching %s (%s) in %s" session-id
                                      (or (plist-get snapshot :title) "untitled")
                                      (plist-get snapshot :cwd)))
    (pop-to-buffer (toold--buffer session-id))
    snapshot))

;;;###autoload
(defun toold-sessions ()
  "Pick one of the daemon's sessions and watch it."
  (interactive)
  (let* ((sessions (toold--sessions))
         (items (mapcar (lambda (session)
                          (cons (format "%s  %s  %s" (plist-get session :session_id)
                                        (or (plist-get session :title) "untitled")
                                        (plist-get session :cwd))
                                (plist-get session :session_id)))
                        sessions)))
    (unless items (user-error "toold: no session yet"))
    (toold-watch (cdr (assoc (completing-read "toold session: " (mapcar #'car items) nil t)
                             items)))))

;;;###autoload
(defun toold-explain (tool arguments)
  "Say how a call of TOOL with ARGUMENTS (JSON) would be decided; nothing runs."
  (interactive "stoold explain, tool: \nsarguments (JSON): ")
  (let* ((decoded (json-parse-string (if (string-empty-p arguments) "{}" arguments)
                                     :object-type 'plist))
         (params (append (list :call (list :name tool :arguments decoded))
                         (if toold--session
                             (list :session_id toold--session)
                           (list :session (list :cwd (expand-file-name default-directory))))))
         (explained (jsonrpc-request (toold--connect) 'permissions/explain params)))
    (message "toold: %s: %s (%s) %s" tool (plist-get explained :decision)
             (or (plist-get explained :step) "-") (plist-get explained :reason))
    explained))

(provide 'toold)
;;; toold.el ends here
