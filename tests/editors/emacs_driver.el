;;; emacs_driver.el --- Drives toold.el for tests/tests/editor_emacs.rs -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by `emacs --batch -Q -L client/emacs -l tests/editors/emacs_driver.el -f
;; ert-run-tests-batch-and-exit': one ERT test that watches the session TOOLD_TEST_SESSION and
;; answers each approval with the next label of TOOLD_TEST_ANSWERS (comma separated), in place
;; of a person at `completing-read'; it records every prompt (its choices, the preview buffer
;; and its major mode, the mode line's count) in DIR/prompts.jsonl, and once DIR/done exists
;; writes the session's buffer to DIR/buffer.txt. DIR is TOOLD_TEST_DIR.

;;; Code:

(require 'ert)
(require 'toold)

(defvar toold-test--dir (getenv "TOOLD_TEST_DIR"))
(defvar toold-test--answers (split-string (or (getenv "TOOLD_TEST_ANSWERS") "") "," t))

(defun toold-test--append (name text)
  (write-region (concat text "\n") nil (expand-file-name name toold-test--dir) t 'silent))

(defun toold-test--read (prompt collection &rest _)
  "Answers as a person would: approvals from the list, a session picker with the first."
  (if (not (string-prefix-p "toold: " prompt))
      (progn (toold-test--append "picked" (car collection)) (car collection))
    (let ((wanted (pop toold-test--answers))
          (preview (get-buffer "*toold preview*")))
      (toold-test--append
       "prompts.jsonl"
       (json-serialize
        (list :prompt prompt
              :labels (vconcat collection)
              :preview (with-current-buffer preview (buffer-string))
              :diff (if (with-current-buffer preview (derived-mode-p 'diff-mode)) t :false)
              :pending (string-trim (toold-mode-line))
              :answered (or wanted ""))))
      wanted)))

(ert-deftest toold-watches-and-approves ()
  (cl-letf (((symbol-function 'completing-read) #'toold-test--read))
    (let ((session (getenv "TOOLD_TEST_SESSION")))
      (toold-sessions)
      (toold-watch session)
      (let ((explained (toold-explain "run_command" "{\"command\": \"git push\"}")))
        (toold-test--append "explain.json" (json-serialize explained :null-object nil
                                                            :false-object :json-false)))
      (toold-test--append "attached" "yes")
      (let ((deadline (+ (float-time) 120)))
        (while (and (not (file-exists-p (expand-file-name "done" toold-test--dir)))
                    (< (float-time) deadline))
          (accept-process-output nil 0.05)))
      (with-current-buffer (format "*toold: %s*" session)
        (should (derived-mode-p 'special-mode))
        (write-region (point-min) (point-max)
                      (expand-file-name "buffer.txt" toold-test--dir) nil 'silent)))))

;; jsonrpc.el reads an empty object as nil: a call without arguments shows `{}'.
(ert-deftest toold-shows-json-as-sent ()
  (should (equal (toold--one-line nil) "{}"))
  (should (equal (toold--one-line (list :command "ls" :dry :json-false))
                 "{\"command\":\"ls\",\"dry\":false}")))

;;; emacs_driver.el ends here
